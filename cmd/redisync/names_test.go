package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/internal/redistest"
)

// TestClientNames: inspect and watch show the name of a holder's Client
// (redisync.WithClientName) beside its id, on a standalone server and on a
// Cluster.
func TestClientNames(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		testClientNames(t, []string{redistest.Standalone(t).Addr})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		testClientNames(t, redistest.NewCluster(t, 3, 0).Addrs())
	})
}

func testClientNames(t *testing.T, addrs []string) {
	ctx := t.Context()
	dial := func(opts ...redisync.Option) *redisync.Client {
		opts = append([]redisync.Option{redisync.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
		c, err := redisync.Dial(rueidis.ClientOption{InitAddress: addrs}, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, c.Close()) })
		return c
	}
	named, anon := dial(redisync.WithClientName("billing@host-7")), dial()
	// A Client on connections of the caller's, which it cannot name.
	opt := rueidis.ClientOption{InitAddress: addrs}
	detect := redisync.DetectChanges(&opt)
	rc, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	onNew, err := redisync.New(rc, detect, redisync.WithClientName("ops-tool"), redisync.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, onNew.Close()) })
	_, err = onNew.Mutex("names:new").Lock(ctx)
	require.NoError(t, err)
	_, err = named.Mutex("names:mutex").Lock(ctx)
	require.NoError(t, err)
	_, err = anon.Mutex("names:anon").Lock(ctx)
	require.NoError(t, err)
	_, err = named.RWMutex("names:rw").Lock(ctx)
	require.NoError(t, err)
	sem := named.Semaphore("names:sem")
	_, err = sem.SetSize(ctx, 3)
	require.NoError(t, err)
	_, err = sem.Lock(ctx, 1)
	require.NoError(t, err)
	_, err = anon.Semaphore("names:sem").Lock(ctx, 2)
	require.NoError(t, err)

	cli := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := run(ctx, append(args, "--addr", addrs[0]), &stdout, &stderr)
		require.Equal(t, exitOK, code, stderr.String())
		require.Empty(t, stderr.String())
		return stdout.String()
	}
	id, anonID := regexp.QuoteMeta(named.ID()), regexp.QuoteMeta(anon.ID())

	require.Regexp(t, `(?m)^  client: +`+id+` \(billing@host-7\)$`, cli("inspect", "names:mutex"))
	require.Regexp(t, `(?m)^  client: +`+anonID+`$`, cli("inspect", "names:anon"))
	// Its name connection is dialed in the background.
	newHolder := regexp.MustCompile(`(?m)^  client: +` + regexp.QuoteMeta(onNew.ID()) + ` \(ops-tool\)$`)
	out := cli("inspect", "names:new")
	for deadline := time.Now().Add(5 * time.Second); !newHolder.MatchString(out) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		out = cli("inspect", "names:new")
	}
	require.Regexp(t, newHolder, out, "inspect names the holder made by New")
	require.Regexp(t, `(?m)^  client: +`+id+` \(billing@host-7\)$`, cli("inspect", "names:rw"))
	out = cli("inspect", "names:sem")
	require.Regexp(t, `(?m)^ +`+id+` \(billing@host-7\)  1 permit  ttl `, out)
	require.Regexp(t, `(?m)^ +`+anonID+`  2 permits  ttl `, out)

	var got struct {
		Kinds []struct {
			Holder *struct {
				ClientID   string  `json:"client_id"`
				ClientName *string `json:"client_name"`
			} `json:"holder"`
			Holders []struct {
				ClientID   string  `json:"client_id"`
				ClientName *string `json:"client_name"`
			} `json:"holders"`
		} `json:"kinds"`
	}
	out = cli("inspect", "--json", "names:mutex")
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got.Kinds, 1, out)
	require.Equal(t, named.ID(), got.Kinds[0].Holder.ClientID)
	require.NotNil(t, got.Kinds[0].Holder.ClientName, out)
	require.Equal(t, "billing@host-7", *got.Kinds[0].Holder.ClientName)
	out = cli("inspect", "--json", "names:sem")
	got.Kinds = nil
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got.Kinds, 1, out)
	names := map[string]*string{}
	for _, h := range got.Kinds[0].Holders {
		names[h.ClientID] = h.ClientName
	}
	require.NotNil(t, names[named.ID()], out)
	require.Equal(t, "billing@host-7", *names[named.ID()])
	require.Contains(t, names, anon.ID(), out)
	require.Nil(t, names[anon.ID()], "a Client without a name has no client_name: %s", out)

	out = cli("watch", "--count", "1", "names:mutex", "names:anon")
	require.Regexp(t, `(?m)^names:mutex +mutex +`+id+` \(billing@host-7\) +1 `, out)
	require.Regexp(t, `(?m)^names:anon +mutex +`+anonID+` +1 `, out)
}
