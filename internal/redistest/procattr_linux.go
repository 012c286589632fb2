package redistest

import "syscall"

// sysProcAttr puts redis-server in its own process group, so that a terminal
// interrupt reaches only the test, and kills it if the test process dies
// without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
