//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"syscall"
	"unsafe"
)

// isatty reports whether fd is a terminal: whether it has terminal
// attributes (a character device such as /dev/null has none).
func isatty(fd uintptr) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, ioctlGetTermios, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
