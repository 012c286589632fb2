package main

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTerminalDetection: where the command is built for, it tells a
// terminal (watch redraws in place, unlock asks): exactly one file defines
// isatty, and it is not the fallback that answers no.
func TestTerminalDetection(t *testing.T) {
	files, err := filepath.Glob("term_*.go")
	require.NoError(t, err)
	for _, goos := range []string{"linux", "darwin", "windows", "freebsd", "openbsd", "netbsd", "dragonfly"} {
		ctx := build.Default
		ctx.GOOS, ctx.GOARCH = goos, "amd64"
		var used []string
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			if ok, err := ctx.MatchFile(".", f); err == nil && ok {
				used = append(used, f)
			}
		}
		require.Len(t, used, 1, "%s: %q", goos, used)
		require.NotEqual(t, "term_other.go", used[0], goos)
	}
}
