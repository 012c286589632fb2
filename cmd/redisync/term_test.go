package main

import (
	"go/build"
	"os"
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
		var defining []string
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			ok, err := ctx.MatchFile(".", f)
			require.NoError(t, err)
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			if ok && strings.Contains(string(src), "\nfunc isatty(") {
				defining = append(defining, f)
			}
		}
		require.Len(t, defining, 1, "%s: %q", goos, defining)
		require.NotEqual(t, "term_other.go", defining[0], goos)
	}
}
