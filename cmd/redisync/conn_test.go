package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync/internal/redistest"
)

// TestAddrDefaultPort: an --addr without a port gets Redis's.
func TestAddrDefaultPort(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	for in, want := range map[string]string{
		"localhost":      "localhost:6379",
		"127.0.0.1":      "127.0.0.1:6379",
		"::1":            "[::1]:6379",
		"[::1]":          "[::1]:6379",
		"localhost:":     "localhost:6379",
		"localhost:6380": "localhost:6380",
		"[::1]:6380":     "[::1]:6380",
	} {
		f := connFlags{addr: in}
		opt, where, err := f.option()
		require.NoError(t, err, in)
		require.Equal(t, []string{want}, opt.InitAddress, in)
		require.Equal(t, want, where, in)
	}
	_, _, err := (&connFlags{addr: "a:b:c"}).option()
	var uerr *usageError
	require.ErrorAs(t, err, &uerr)
	require.Equal(t, `--addr "a:b:c" is not host:port`, uerr.msg)
}

// TestRedisURLWithoutScheme: a REDIS_URL without a scheme gets a message
// that says what to write, without echoing the URL and its password.
func TestRedisURLWithoutScheme(t *testing.T) {
	for _, url := range []string{"localhost:6379", "127.0.0.1", "user:secret@localhost:6379"} {
		t.Setenv("REDIS_URL", url)
		stdout, stderr, code := runIn(t, "inspect", "x")
		require.Equal(t, exitFailure, code, url)
		require.Empty(t, stdout)
		require.Equal(t, "redisync inspect: REDIS_URL has no scheme: write redis://host:port (rediss:// for TLS, unix:///path for a socket)\n", stderr, url)
	}
}

// TestTLSToPlainServer: TLS to a server without TLS fails at once with a
// message that says so, rather than with the timeout.
func TestTLSToPlainServer(t *testing.T) {
	srv := redistest.Standalone(t)
	for _, tc := range []struct {
		url  string
		args []string
	}{
		{"", []string{"inspect", "--tls", "--timeout", "30s", "--addr", srv.Addr, "x"}},
		{"rediss://" + srv.Addr, []string{"inspect", "--timeout", "30s", "x"}},
	} {
		t.Setenv("REDIS_URL", tc.url)
		start := time.Now()
		stdout, stderr, code := runIn(t, tc.args...)
		require.Less(t, time.Since(start), 15*time.Second, "the --timeout was waited for")
		require.Equal(t, exitFailure, code, stderr)
		require.Empty(t, stdout)
		require.Equal(t, "redisync inspect: connect to Redis at "+srv.Addr+": the server answers without TLS: use redis:// rather than rediss://, and no --tls\n", stderr)
	}
}
