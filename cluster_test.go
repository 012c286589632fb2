package redisync

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync/internal/redistest"
)

// slotOwner returns the master serving key's slot and its replica.
func slotOwner(t *testing.T, c *redistest.Cluster, key string) (master, replica *redistest.Server) {
	t.Helper()
	slot, err := strconv.Atoi(mustDo(t, c.Masters[0], "CLUSTER", "KEYSLOT", key))
	require.NoError(t, err)
	for _, m := range c.Masters {
		for _, line := range strings.Split(mustDo(t, m, "CLUSTER", "NODES"), "\n") {
			f := strings.Fields(line)
			if len(f) < 9 || !strings.Contains(f[2], "myself") {
				continue
			}
			for _, r := range f[8:] {
				lo, hi, _ := strings.Cut(r, "-")
				a, _ := strconv.Atoi(lo)
				b := a
				if hi != "" {
					b, _ = strconv.Atoi(hi)
				}
				if slot >= a && slot <= b {
					master = m
				}
			}
		}
	}
	require.NotNil(t, master, "no master serves slot %d", slot)
	for _, r := range c.Replicas {
		if strings.Contains(mustDo(t, r, "INFO", "replication"), "master_port:"+strconv.Itoa(master.Port)) {
			replica = r
		}
	}
	require.NotNil(t, replica, "no replica of %s", master.Addr)
	return master, replica
}

func replOffset(t *testing.T, s *redistest.Server, field string) string {
	for _, line := range strings.Split(mustDo(t, s, "INFO", "replication"), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// awaitPromotion waits up to d until replica answers ROLE as a master, and
// returns when it did.
func awaitPromotion(t *testing.T, replica *redistest.Server, d time.Duration) time.Time {
	t.Helper()
	var at time.Time
	eventually(t, d, func() bool {
		role, err := replica.Do("ROLE")
		at = time.Now()
		return err == nil && strings.HasPrefix(role, "master")
	}, "replica not promoted")
	return at
}

func mustDo(t *testing.T, s *redistest.Server, args ...string) string {
	t.Helper()
	out, err := s.Do(args...)
	require.NoError(t, err, "%v on %s", args, s.Addr)
	return out
}

// A failover to a replica that has caught up keeps the lock: renewals and
// wake-ups move to the new master.
func TestClusterFailoverKeepsLock(t *testing.T) {
	e := ownCluster(t)
	ctx := withTimeout(t, time.Minute)
	holder := e.client(t, WithWatchdogLease(3*time.Second))
	m := holder.Mutex("failover")
	l := mustLock(t, ctx, m.Lock)
	next := e.client(t).Mutex("failover").Acquire(ctx)
	e.awaitChannels(t, 1, 5*time.Second, "waiter did not subscribe")

	master, replica := slotOwner(t, e.cluster, m.keys.lock)
	// Once the replica has everything the master wrote, it takes over.
	eventually(t, 10*time.Second, func() bool {
		return replOffset(t, master, "master_repl_offset") == replOffset(t, replica, "slave_repl_offset")
	}, "replica not caught up")
	mustDo(t, replica, "CLUSTER", "FAILOVER", "TAKEOVER")
	awaitPromotion(t, replica, 20*time.Second)

	// Three renewal periods on the new master.
	select {
	case <-l.Lost():
		t.Fatalf("lock lost in a graceful failover: %v", l.Err())
	case <-time.After(3 * time.Second):
	}
	st, err := m.Inspect(ctx)
	require.NoError(t, err)
	require.True(t, st.Locked)
	require.Equal(t, l.Token(), st.Token)

	start := time.Now()
	require.NoError(t, l.Unlock(ctx))
	nl := recv(t, next, 10*time.Second, "waiter not woken after the failover")
	require.Greater(t, nl.Token(), l.Token())
	t.Logf("hand-off after failover took %v", time.Since(start))
	require.NoError(t, nl.Unlock(ctx))
}

// When the master serving a lock dies, its replica is promoted. The lock
// survives if it had been replicated (asynchronously); either way the
// holder's lease is either kept or reported lost, and the lock works again
// afterwards.
func TestClusterMasterKilled(t *testing.T) {
	e := ownCluster(t)
	ctx := withTimeout(t, time.Minute)
	m := e.client(t, WithWatchdogLease(10*time.Second)).Mutex("killed-master")
	l := mustLock(t, ctx, m.Lock)
	master, replica := slotOwner(t, e.cluster, m.keys.lock)
	require.NoError(t, master.Kill())
	awaitPromotion(t, replica, 30*time.Second)

	other := e.client(t).Mutex("killed-master")
	select {
	case <-l.Lost():
		t.Logf("lease reported lost: %v", l.Err())
		nl := mustLock(t, ctx, other.Lock)
		require.NoError(t, nl.Unlock(ctx))
	case <-time.After(5 * time.Second):
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.True(t, st.Locked, "lease kept, so the lock must be held")
		t.Logf("lease kept across the failover")
		// A new Client may first be told of the dead master by a node that
		// has not noticed yet: connection errors until it learns.
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err = other.TryLock(ctx)
			if err == nil || errors.Is(err, ErrLocked) || !transient(err) || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		require.ErrorIs(t, err, ErrLocked)
		require.NoError(t, l.Unlock(ctx))
		nl := mustLock(t, ctx, other.Lock)
		require.NoError(t, nl.Unlock(ctx))
	}
}

// A failover to a replica that never got the lock's key is found at once:
// the connection to the dead master breaks, every held key is read again,
// and the new master, which lacks the key, answers as soon as it serves.
func TestClusterFailoverWithoutTheKeyLosesAtOnce(t *testing.T) {
	e := ownCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := e.client(t) // the default watchdog lease: renewals every 10 s
	m := holder.Mutex("failover-without-key")
	master, replica := slotOwner(t, e.cluster, m.keys.lock)
	// The replica misses the lock: its link to the master is cut while it
	// is paused (so that it cannot come back), the lock is taken, and the
	// master dies before the replica resumes.
	require.NoError(t, replica.Pause())
	mustDo(t, master, "CLIENT", "KILL", "TYPE", "replica")
	l := mustLock(t, ctx, m.Lock)
	time.Sleep(100 * time.Millisecond) // tracked
	require.NoError(t, master.Kill())
	require.NoError(t, replica.Resume())
	mustDo(t, replica, "CLUSTER", "FAILOVER", "TAKEOVER")
	serving := awaitPromotion(t, replica, 30*time.Second)
	select {
	case <-l.Lost():
		t.Logf("lost %v after the new master took over: %v", time.Since(serving), l.Err())
	case <-time.After(5 * time.Second):
		t.Fatal("lease not reported lost 5s after the new master took over")
	}
	require.ErrorIs(t, l.Err(), ErrExpired)
	_, err := replica.Do("EXISTS", m.keys.lock)
	require.NoError(t, err)
}
