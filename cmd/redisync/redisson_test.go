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

// TestInspectRedissonRW: inspect shows the mode, writer and readers of a
// lock in Redisson's RReadWriteLock layout.
func TestInspectRedissonRW(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	srv := redistest.Standalone(t)
	ctx := t.Context()
	c := dialT(t, srv.Addr)
	rw := c.RedissonReadWriteLock("report")
	w := mustLock(t, ctx, rw.Lock)
	mustLock(t, w.Context(), rw.RLock) // the writer reads

	stdout, stderr, code := runIn(t, "inspect", "--addr", srv.Addr, "report")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `redisson read-write lock "report"`)
	require.Regexp(t, `(?m)^  mode: +write$`, stdout)
	require.Regexp(t, `(?m)^  writer: +`+c.ID()+`:[0-9]+:write$`, stdout)
	require.Regexp(t, `(?m)^  reader: +`+c.ID()+`:[0-9]+$`, stdout)
	require.Regexp(t, `(?m)^  client: +`+c.ID()+`$`, stdout)
	require.NotContains(t, stdout, `redisson lock "report"`, "not shown as an RLock")

	stdout, stderr, code = runIn(t, "inspect", "--json", "--addr", srv.Addr, "report")
	require.Equal(t, 0, code, stderr)
	var snap struct {
		Kinds []struct {
			Kind   string `json:"kind"`
			Mode   string `json:"mode"`
			Writer struct {
				ClientID string `json:"client_id"`
				Holds    int    `json:"holds"`
			} `json:"writer"`
		} `json:"kinds"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &snap))
	require.Len(t, snap.Kinds, 1)
	require.Equal(t, "redisson-rw", snap.Kinds[0].Kind)
	require.Equal(t, "write", snap.Kinds[0].Mode)
	require.Equal(t, c.ID(), snap.Kinds[0].Writer.ClientID)
	require.Equal(t, 1, snap.Kinds[0].Writer.Holds)
}
