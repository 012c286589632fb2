package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync/internal/redistest"
)

// runIn runs the command line in this process and returns its outputs.
func runIn(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(t.Context(), args, &o, &e)
	return o.String(), e.String(), code
}

// TestErrorOnePrefix: the command does not repeat the library's prefix.
func TestErrorOnePrefix(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	srv := redistest.Standalone(t)
	_, err := srv.Do("SET", "redisync:{x}", "precious")
	require.NoError(t, err)
	stdout, stderr, code := runIn(t, "inspect", "--addr", srv.Addr, "x")
	require.Equal(t, exitFailure, code, stderr)
	require.Empty(t, stdout)
	require.Equal(t, 1, strings.Count(stderr, "redisync"), stderr)
	require.NotContains(t, stderr, "script")
	require.True(t, strings.HasPrefix(stderr, "redisync inspect: inspect: key holds a value of the wrong type: WRONGTYPE "), stderr)
}
