package main

import (
	"regexp"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "--version", "-version"} {
		stdout, stderr, code := runIn(t, arg)
		require.Equal(t, exitOK, code, stderr)
		require.Empty(t, stderr)
		require.Regexp(t, `^redisync (v[0-9]\S*|\(devel\)( [0-9a-f]+(\+dirty)?)?) `+regexp.QuoteMeta(runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH)+"\n$", stdout)
	}
	_, stderr, code := runIn(t, "version", "extra")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `redisync version: unexpected argument "extra"`)
	stdout, _, _ := runIn(t, "help")
	require.Regexp(t, `(?m)^  version +\S`, stdout)
}
