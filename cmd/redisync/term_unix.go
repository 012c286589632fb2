package main

import (
	"syscall"
	"unsafe"
)

// isatty reports whether fd is a terminal: whether it has terminal
// attributes (a character device such as /dev/null has none).
func isatty(fd uintptr) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
