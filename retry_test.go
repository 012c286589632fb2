package redisync

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoffJitters(t *testing.T) {
	b := backoff{first: 10 * time.Millisecond, limit: 80 * time.Millisecond}
	seen := map[time.Duration]bool{}
	for i, want := range []time.Duration{10, 20, 40, 80, 80, 80} {
		d := b.next()
		want *= time.Millisecond
		require.GreaterOrEqual(t, d, want/2, "pause %d", i)
		require.LessOrEqual(t, d, want, "pause %d", i)
		seen[d] = true
	}
	b.reset()
	require.LessOrEqual(t, b.next(), 10*time.Millisecond)
	for range 50 {
		seen[jitter(time.Second)] = true
	}
	require.Greater(t, len(seen), 40, "pauses are drawn at random")
}

// TestWaiterWarnsOnceWhileRedisIsDown: a Lock that retries for seconds
// while Redis is down logs one warning, and its recovery.
func TestWaiterWarnsOnceWhileRedisIsDown(t *testing.T) {
	e := ownServer(t)
	log, lines := newRecorder(slog.LevelInfo)
	m := e.client(t, WithLogger(log)).Mutex(t.Name())
	l, err := m.Lock(context.Background()) // connected, scripts loaded
	require.NoError(t, err)
	require.NoError(t, l.Unlock(context.Background()))
	require.NoError(t, e.server.Kill())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		time.Sleep(2500 * time.Millisecond)
		e.server.Start()
	}()
	l, err = m.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	require.Len(t, matching(lines(), "WARN redisync: acquire failed; retrying"), 1, "%v", lines())
	require.Len(t, matching(lines(), "INFO redisync: acquire failed before; recovered"), 1, "%v", lines())
}

// TestTryLockWithLostReplyTakesNothing: a TryLock (of a Mutex, a FairMutex,
// a Group) whose script took the lock but whose reply was lost on the
// connection returns the connection's error, and leaves nothing held: the
// outcome is unknown and no attempt follows to learn it, so what the
// script may have taken is given back, and another Client takes the lock
// at once rather than when the lease of nobody's hold runs out.
func TestTryLockWithLostReplyTakesNothing(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		c, rf := e.faultyClient(t, WithWatchdogLease(20*time.Second))
		other := e.client(t)
		ctx := withTimeout(t, 30*time.Second)
		name := t.Name()
		for _, tc := range []struct {
			what   string
			script script
			try    func() error
			taken  func() error // another Client's TryLock
		}{
			{"mutex", acquireScript,
				func() error { _, err := c.Mutex(name + "-m").TryLock(ctx); return err },
				func() error { return tryUnlock(ctx, other.Mutex(name+"-m").TryLock) }},
			{"fair mutex", fairAcquireScript,
				func() error { _, err := c.FairMutex(name + "-f").TryLock(ctx); return err },
				func() error { return tryUnlock(ctx, other.FairMutex(name+"-f").TryLock) }},
			{"group", groupAcquireScript,
				func() error {
					_, err := NewGroup(c.Mutex("{"+name+"}a"), c.Mutex("{"+name+"}b")).TryLock(ctx)
					return err
				},
				func() error {
					return tryUnlock(ctx, NewGroup(other.Mutex("{"+name+"}a"), other.Mutex("{"+name+"}b")).TryLock)
				}},
		} {
			r := rf.lose(runs(tc.script), 1, 0)
			require.ErrorIs(t, tc.try(), errReplyLost, tc.what)
			require.Equal(t, 1, r.Hits(), tc.what)
			require.NoError(t, tc.taken(), "%s: the lock its lost reply took is still held", tc.what)
		}
	})
}

// tryUnlock takes a lock with try and releases it.
func tryUnlock(ctx context.Context, try func(context.Context) (*Lease, error)) error {
	l, err := try(ctx)
	if err != nil {
		return err
	}
	return l.Unlock(ctx)
}
