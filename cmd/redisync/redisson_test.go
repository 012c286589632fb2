package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync/internal/redistest"
)

// TestInspectRedisson: inspect shows the holder and hold count of a lock
// in Redisson's RLock layout, whoever wrote it, and ignores a key of
// another type under the name.
func TestInspectRedisson(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	srv := redistest.Standalone(t)
	ctx := t.Context()
	c := dialT(t, srv.Addr)
	l := mustLock(t, ctx, c.RedissonFencedLock("orders").Lock)
	mustLock(t, l.Context(), c.RedissonFencedLock("orders").Lock) // a re-entry

	stdout, stderr, code := runIn(t, "inspect", "--addr", srv.Addr, "orders")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `redisson lock "orders"`)
	require.Regexp(t, `(?m)^  holder: +`+c.ID()+`:[0-9]+$`, stdout)
	require.Regexp(t, `(?m)^  client: +`+c.ID()+`$`, stdout)
	require.Regexp(t, `(?m)^  holds: +2$`, stdout)
	require.Regexp(t, `(?m)^  ttl: +[0-9.]+(ms|s)$`, stdout)
	require.Regexp(t, `(?m)^  token: +2 `, stdout)

	stdout, stderr, code = runIn(t, "inspect", "--json", "--addr", srv.Addr, "orders")
	require.Equal(t, 0, code, stderr)
	var snap struct {
		Kinds []struct {
			Kind    string `json:"kind"`
			Holders []struct {
				Owner    string `json:"owner"`
				ClientID string `json:"client_id"`
				Holds    int    `json:"holds"`
			} `json:"holders"`
		} `json:"kinds"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &snap))
	require.Len(t, snap.Kinds, 1)
	require.Equal(t, "redisson", snap.Kinds[0].Kind)
	require.Len(t, snap.Kinds[0].Holders, 1)
	require.Equal(t, c.ID(), snap.Kinds[0].Holders[0].ClientID)
	require.Equal(t, 2, snap.Kinds[0].Holders[0].Holds)

	_, err := srv.Do("SET", "plain", "value")
	require.NoError(t, err)
	stdout, stderr, code = runIn(t, "inspect", "--addr", srv.Addr, "plain")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "free")
}
