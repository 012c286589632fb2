package redistest

import "syscall"

// sysProcAttr puts redis-server in its own process group, so that a console
// interrupt reaches only the test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}
