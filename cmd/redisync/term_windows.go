package main

import "syscall"

// isatty reports whether fd is a console: whether it has a console mode.
// The terminals of Cygwin and MSYS2 (mintty) are pipes: not consoles.
func isatty(fd uintptr) bool {
	var mode uint32
	return syscall.GetConsoleMode(syscall.Handle(fd), &mode) == nil
}
