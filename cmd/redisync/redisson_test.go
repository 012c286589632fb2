package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/internal/redistest"
	"github.com/redisync/redisync/redisson"
)

// TestInspectRedisson: inspect shows the holder and hold count of a lock
// in Redisson's RLock layout, whoever wrote it, and ignores a key of
// another type under the name.
func TestInspectRedisson(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	srv := redistest.Standalone(t)
	ctx := t.Context()
	c := dialT(t, srv.Addr)
	l := mustLock(t, ctx, redisson.New(c).FencedLock("orders").Lock)
	mustLock(t, l.Context(), redisson.New(c).FencedLock("orders").Lock) // a re-entry

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
	rw := redisson.New(c).ReadWriteLock("report")
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

// TestInspectRedissonPermitExpirableSemaphore: inspect finds a Redisson
// permit expirable semaphore with permits acquired by its zset, and shows
// its permits available and each permit's id and lease, on a standalone
// server and on a Cluster.
func TestInspectRedissonPermitExpirableSemaphore(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	t.Run("standalone", func(t *testing.T) {
		testInspectRedissonPSem(t, []string{redistest.Standalone(t).Addr})
	})
	t.Run("cluster", func(t *testing.T) {
		testInspectRedissonPSem(t, redistest.NewCluster(t, 3, 0).Addrs())
	})
}

func testInspectRedissonPSem(t *testing.T, addrs []string) {
	ctx := t.Context()
	c := dialAll(t, addrs)
	addr := []string{"--addr", addrs[0]}
	s := redisson.New(c).PermitExpirableSemaphore("jobs")
	ok, err := s.TrySetPermits(ctx, 3)
	require.NoError(t, err)
	require.True(t, ok)

	// No permit acquired: the string alone is only a note.
	stdout, stderr, code := runIn(t, append([]string{"inspect"}, append(addr, "jobs")...)...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "jobs: free (no lock of any kind)\nnote: the string \"jobs\" holds 3: a Redisson semaphore, permit-expirable semaphore or count-down latch keeps its number there, and so may any program; --redisson KIND reads it as one\n", stdout)
	stdout, stderr, code = runIn(t, append([]string{"inspect", "--redisson", "permit-expirable-semaphore"}, append(addr, "jobs")...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `redisson permit-expirable semaphore "jobs"`)
	require.Regexp(t, `(?m)^  acquired: +0$`, stdout)

	l := mustLock(t, ctx, func(ctx context.Context) (*redisync.Lease, error) { return s.Lock(ctx, 2) })
	ids := s.PermitIDs(l)
	require.Len(t, ids, 2)
	stdout, stderr, code = runIn(t, append([]string{"inspect"}, append(addr, "jobs")...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `redisson permit-expirable semaphore "jobs"`)
	require.Regexp(t, `(?m)^  available: +1$`, stdout)
	require.Regexp(t, `(?m)^  acquired: +2$`, stdout)
	for _, id := range ids {
		require.Regexp(t, `(?m)^ +`+id+`  lease [0-9.]+(ms|s)$`, stdout)
	}
	require.Regexp(t, `(?m)^  keys: +jobs$`, stdout)
	require.Regexp(t, `(?m)^ +\{jobs\}:timeout$`, stdout)
	require.NotContains(t, stdout, "note:", "the string is explained")

	stdout, stderr, code = runIn(t, append([]string{"inspect", "--json"}, append(addr, "jobs")...)...)
	require.Equal(t, 0, code, stderr)
	var snap struct {
		Note  string `json:"note"`
		Kinds []struct {
			Kind      string   `json:"kind"`
			Available int64    `json:"available"`
			Acquired  int      `json:"acquired"`
			Keys      []string `json:"keys"`
			Permits   []struct {
				ID      string `json:"id"`
				LeaseMs int64  `json:"lease_ms"`
				Expired bool   `json:"expired"`
			} `json:"permits"`
		} `json:"kinds"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &snap))
	require.Empty(t, snap.Note)
	require.Len(t, snap.Kinds, 1)
	k := snap.Kinds[0]
	require.Equal(t, "redisson-permit-expirable-semaphore", k.Kind)
	require.EqualValues(t, 1, k.Available)
	require.Equal(t, 2, k.Acquired)
	require.Equal(t, []string{"jobs", "{jobs}:timeout"}, k.Keys)
	require.Len(t, k.Permits, 2)
	for _, p := range k.Permits {
		require.Contains(t, ids, p.ID)
		require.Positive(t, p.LeaseMs)
		require.False(t, p.Expired)
	}
	require.NoError(t, l.Unlock(ctx))
}

// dialAll is dialT for a server or a Cluster.
func dialAll(t *testing.T, addrs []string) *redisync.Client {
	t.Helper()
	c, err := redisync.Dial(rueidis.ClientOption{InitAddress: addrs}, redisync.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// TestInspectRedissonSemaphoreAndLatch: the string NAME of a Redisson
// semaphore or count-down latch is read as the kind --redisson names, and
// only then; a name that holds something else is an error then.
func TestInspectRedissonSemaphoreAndLatch(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	srv := redistest.Standalone(t)
	ctx := t.Context()
	c := dialT(t, srv.Addr)
	ok, err := redisson.New(c).Semaphore("pool").TrySetPermits(ctx, 4)
	require.NoError(t, err)
	require.True(t, ok)
	mustLock(t, ctx, func(ctx context.Context) (*redisync.Lease, error) {
		return redisson.New(c).Semaphore("pool").Lock(ctx, 1)
	})
	ok, err = redisson.New(c).CountDownLatch("gate").TrySetCount(ctx, 2)
	require.NoError(t, err)
	require.True(t, ok)

	stdout, stderr, code := runIn(t, "inspect", "--addr", srv.Addr, "pool")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "pool: free (no lock of any kind)\n")
	require.Contains(t, stdout, `note: the string "pool" holds 3`)

	stdout, stderr, code = runIn(t, "inspect", "--redisson", "semaphore", "--addr", srv.Addr, "pool")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `redisson semaphore "pool"`)
	require.Regexp(t, `(?m)^  available: +3 permits`, stdout)
	require.Regexp(t, `(?m)^  ttl: +no expiry$`, stdout)
	require.Regexp(t, `(?m)^  keys: +pool$`, stdout)
	require.NotContains(t, stdout, "note:")
	require.NotContains(t, stdout, "free")

	stdout, stderr, code = runIn(t, "inspect", "--redisson", "latch", "--json", "--addr", srv.Addr, "gate")
	require.Equal(t, 0, code, stderr)
	var snap struct {
		Kinds []struct {
			Kind  string `json:"kind"`
			Count int64  `json:"count"`
			TTLms int64  `json:"ttl_ms"`
		} `json:"kinds"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &snap))
	require.Len(t, snap.Kinds, 1)
	require.Equal(t, "redisson-latch", snap.Kinds[0].Kind)
	require.EqualValues(t, 2, snap.Kinds[0].Count)
	require.EqualValues(t, -1, snap.Kinds[0].TTLms)

	// A latch at zero is open: nothing in use.
	for range 2 {
		_, err := redisson.New(c).CountDownLatch("gate").CountDown(ctx)
		require.NoError(t, err)
	}
	stdout, stderr, code = runIn(t, "inspect", "--redisson", "latch", "--addr", srv.Addr, "gate")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "gate: free (no lock of any kind)\n", stdout)

	// Named the wrong kind: an error, not a guess.
	mustLock(t, ctx, redisson.New(c).Lock("held").Lock)
	_, stderr, code = runIn(t, "inspect", "--redisson", "semaphore", "--addr", srv.Addr, "held")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `"held" is not a Redisson semaphore`)
	_, stderr, code = runIn(t, "inspect", "--redisson", "permit-expirable-semaphore", "--addr", srv.Addr, "held")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `"held" is not a Redisson permit expirable semaphore`)

	// watch reads it the same way.
	stdout, stderr, code = runIn(t, "watch", "--count", "1", "--redisson", "semaphore", "--addr", srv.Addr, "pool")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^pool +redisson semaphore +3 available +- +no expiry`, stdout)
}

// javaField is a Redisson holder's field as a Java client writes it:
// UUID:THREADID.
const javaField = "9b4f3a2e-1c7d-4e0a-8f6b-2d5c1e9a7b30:57"

// javaHolds has a Java client hold the RLock name on srv, with a lease of
// 30 s.
func javaHolds(t *testing.T, srv *redistest.Server, name string) {
	t.Helper()
	_, err := srv.Do("HSET", name, javaField, "1")
	require.NoError(t, err)
	_, err = srv.Do("PEXPIRE", name, "30000")
	require.NoError(t, err)
}

// TestUnlockForceRedisson: unlock --force frees the Redisson locks a Java
// client holds (an RLock, a fair lock with a Java waiter queued, a
// read-write lock held for writing, one held for reading), and --kind
// names them.
func TestUnlockForceRedisson(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	srv := redistest.Standalone(t)
	do := func(args ...string) {
		t.Helper()
		_, err := srv.Do(args...)
		require.NoError(t, err)
	}
	free := func(name string) {
		t.Helper()
		n, err := srv.Do("EXISTS", name)
		require.NoError(t, err)
		require.Equal(t, "0", n, "%s still held", name)
	}
	future := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)

	javaHolds(t, srv, "java:rlock")
	stdout, stderr, code := runIn(t, "unlock", "--force", "--yes", "--addr", srv.Addr, "java:rlock")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `force-unlocked redisson lock "java:rlock" (was held by `+javaField)
	free("java:rlock")

	javaHolds(t, srv, "java:fair")
	do("RPUSH", "redisson_lock_queue:{java:fair}", javaField+"0")
	do("ZADD", "redisson_lock_timeout:{java:fair}", future, javaField+"0")
	stdout, stderr, code = runIn(t, "unlock", "--force", "--yes", "--kind", "redisson", "--addr", srv.Addr, "java:fair")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `force-unlocked redisson lock "java:fair"`)
	free("java:fair")

	do("HSET", "java:rw", "mode", "write", javaField+":write", "1")
	do("PEXPIRE", "java:rw", "30000")
	stdout, stderr, code = runIn(t, "unlock", "--force", "--yes", "--kind", "redisson-rw", "--addr", srv.Addr, "java:rw")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `force-unlocked redisson read-write lock "java:rw" (was write-held by `+javaField+`:write)`)
	free("java:rw")

	do("HSET", "java:rw", "mode", "read", javaField, "2")
	do("SET", "{java:rw}:"+javaField+":rwlock_timeout:1", "1", "PX", "30000")
	do("PEXPIRE", "java:rw", "30000")
	stdout, stderr, code = runIn(t, "unlock", "--force", "--yes", "--addr", srv.Addr, "java:rw")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `force-unlocked redisson read-write lock "java:rw" (was held by 1 reader)`)
	free("java:rw")
}

// TestUnlockNothingMatchedButHeld: when nothing unlock may break matches
// but something is held under the name, unlock says what is there and
// exits non-zero; a name with nothing at all is no failure.
func TestUnlockNothingMatchedButHeld(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	srv := redistest.Standalone(t)
	javaHolds(t, srv, "java:held")

	stdout, stderr, code := runIn(t, "unlock", "--force", "--yes", "--kind", "mutex", "--addr", srv.Addr, "java:held")
	require.Equal(t, exitFailure, code, stdout)
	require.Contains(t, stderr, "no mutex held")
	require.Contains(t, stderr, "redisson lock held by "+javaField)
	n, err := srv.Do("EXISTS", "java:held")
	require.NoError(t, err)
	require.Equal(t, "1", n, "the Redisson lock was left alone")

	stdout, stderr, code = runIn(t, "unlock", "--force", "--yes", "--addr", srv.Addr, "nothing:here")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "nothing:here: nothing to unlock (nothing held)\n", stdout)
}

// TestInspectRLockHasNoQueue: an RLock has no queue: inspect and watch say
// its waiters are not recorded, rather than none, and list only the keys
// that exist.
func TestInspectRLockHasNoQueue(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	srv := redistest.Standalone(t)
	javaHolds(t, srv, "java:plain")

	stdout, stderr, code := runIn(t, "inspect", "--addr", srv.Addr, "java:plain")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^  waiters: +not recorded`, stdout)
	require.NotContains(t, stdout, "redisson_lock_queue:{java:plain}")
	require.NotContains(t, stdout, "redisson_lock_token:{java:plain}")

	stdout, stderr, code = runIn(t, "inspect", "--json", "--addr", srv.Addr, "java:plain")
	require.Equal(t, 0, code, stderr)
	var snap struct {
		Kinds []struct {
			Keys []string `json:"keys"`
		} `json:"kinds"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &snap))
	require.Len(t, snap.Kinds, 1)
	require.Equal(t, []string{"java:plain"}, snap.Kinds[0].Keys)
}
