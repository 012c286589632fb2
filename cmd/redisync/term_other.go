//go:build !linux && !darwin && !dragonfly && !freebsd && !netbsd && !openbsd && !windows

package main

// isatty reports false where the command cannot tell a terminal: watch
// then prints a block per refresh and unlock needs --yes.
func isatty(fd uintptr) bool { return false }
