//go:build !linux && !windows

package redistest

import "syscall"

// sysProcAttr puts redis-server in its own process group, so that a terminal
// interrupt reaches only the test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
