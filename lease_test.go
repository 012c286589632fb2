package redisync

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// recordingHandler keeps the messages logged at or above a level.
type recordingHandler struct {
	level slog.Level
	mu    *sync.Mutex
	lines *[]string
}

func newRecorder(level slog.Level) (*slog.Logger, func() []string) {
	var mu sync.Mutex
	var lines []string
	h := recordingHandler{level: level, mu: &mu, lines: &lines}
	return slog.New(h), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lines...)
	}
}

func (h recordingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	*h.lines = append(*h.lines, r.Level.String()+" "+r.Message)
	h.mu.Unlock()
	return nil
}
func (h recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordingHandler) WithGroup(string) slog.Handler      { return h }

// matching returns the lines that contain s.
func matching(lines []string, s string) []string {
	var out []string
	for _, l := range lines {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

func TestLeaseDeadline(t *testing.T) {
	e := standaloneEnv(t)
	ctx := context.Background()
	c := e.client(t)
	before := time.Now()
	l, err := c.Mutex(t.Name(), WithFixedLease(2*time.Second)).Lock(ctx)
	require.NoError(t, err)
	d, ok := l.Deadline()
	require.True(t, ok)
	require.WithinRange(t, d, before.Add(1800*time.Millisecond), time.Now().Add(1800*time.Millisecond))
	st, err := c.Mutex(t.Name()).Inspect(ctx)
	require.NoError(t, err)
	require.True(t, time.Now().Add(st.TTL).After(d), "the server's expiry comes after the holder's deadline")

	w, err := c.Mutex(t.Name() + "/watchdog").Lock(ctx)
	require.NoError(t, err)
	wd, ok := w.Deadline()
	require.True(t, ok)
	require.True(t, wd.After(time.Now().Add(20*time.Second)), "a watchdog lease of 30s")

	require.NoError(t, l.Unlock(ctx))
	_, ok = l.Deadline()
	require.False(t, ok)
	require.NoError(t, w.Unlock(ctx))
	_, ok = (*Lease)(nil).Deadline()
	require.False(t, ok)
}

// TestLeaseDetach: one run per time slot: lock the slot with a fixed
// lease, detach, close the Client; the lock stays until its lease runs out.
func TestLeaseDetach(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var lost, expired atomic.Int64
		m := Metrics{Lost: func(string, string, error) { lost.Add(1) }, Expired: func(string, string) { expired.Add(1) }}
		c := e.client(t, WithMetrics(m))
		slot := c.Mutex(t.Name(), WithFixedLease(time.Second))
		l := mustLock(t, ctx, slot.Lock)
		require.NoError(t, l.Detach())
		require.ErrorIs(t, l.Err(), ErrDetached)
		require.ErrorIs(t, context.Cause(l.Context()), ErrDetached)
		require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
		require.ErrorIs(t, l.Detach(), ErrNotHeld)
		require.NoError(t, c.Close())
		select {
		case <-l.Lost():
			t.Fatal("a detached lease is not lost")
		default:
		}

		other := e.client(t)
		st, err := other.Mutex(t.Name()).Inspect(ctx)
		require.NoError(t, err)
		require.True(t, st.Locked, "Close left the detached lock alone")
		_, err = other.Mutex(t.Name()).TryLock(ctx)
		require.ErrorIs(t, err, ErrLocked)
		eventually(t, 3*time.Second, func() bool {
			l, err := other.Mutex(t.Name()).TryLock(ctx)
			if err != nil {
				return false
			}
			require.NoError(t, l.Unlock(ctx))
			return true
		}, "the detached lock did not expire")
		require.Zero(t, lost.Load())
		require.Zero(t, expired.Load())

		require.ErrorIs(t, (*Lease)(nil).Detach(), ErrNotHeld)
		gc := e.client(t)
		gl, err := NewGroup(gc.Mutex(t.Name()+"/a"), gc.Mutex(t.Name()+"/b")).Lock(ctx)
		require.NoError(t, err)
		require.ErrorIs(t, gl.Detach(), ErrInvalidArgument)
		require.NoError(t, gl.Unlock(ctx))
	})
}

// TestFixedLeaseRunsOutQuietly: a fixed lease that runs out is reported on
// Lost and Err, logged at Debug and counted by Metrics.Expired, not Lost.
func TestFixedLeaseRunsOutQuietly(t *testing.T) {
	e := standaloneEnv(t)
	ctx := context.Background()
	var lost, expired atomic.Int64
	m := Metrics{Lost: func(string, string, error) { lost.Add(1) }, Expired: func(string, string) { expired.Add(1) }}
	log, lines := newRecorder(slog.LevelDebug)
	c := e.client(t, WithMetrics(m), WithLogger(log))
	l, err := c.Mutex(t.Name(), WithFixedLease(300*time.Millisecond)).Lock(ctx)
	require.NoError(t, err)
	select {
	case <-l.Lost():
	case <-time.After(3 * time.Second):
		t.Fatal("fixed lease not reported run out")
	}
	require.ErrorIs(t, l.Err(), ErrExpired)
	require.EqualValues(t, 1, expired.Load())
	require.Zero(t, lost.Load())
	require.Len(t, matching(lines(), "DEBUG redisync: fixed lease ran out"), 1, "%v", lines())
	require.Empty(t, matching(lines(), "WARN"), "%v", lines())
}

// TestUnreceivedAcquireIsLogged: a Lease Acquire delivered that nobody
// received for a second before its context ended is released, and the
// mistake is logged.
func TestUnreceivedAcquireIsLogged(t *testing.T) {
	e := standaloneEnv(t)
	log, lines := newRecorder(slog.LevelWarn)
	m := e.client(t, WithLogger(log)).Mutex(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	m.Acquire(ctx) // the mistake: a statement
	<-ctx.Done()
	eventually(t, 5*time.Second, func() bool {
		st, err := m.Inspect(context.Background())
		return err == nil && !st.Locked
	}, "the unreceived lease was not released")
	require.Len(t, matching(lines(), "never received"), 1, "%v", lines())
	require.Empty(t, matching(lines(), "lease lost"), "%v", lines())
}

// TestAcquireClaimedLeaseIsKept: a Lease received from Acquire and used
// before its context ends stays held after the context ended.
func TestAcquireClaimedLeaseIsKept(t *testing.T) {
	e := standaloneEnv(t)
	m := e.client(t).Mutex(t.Name())
	ctx, cancel := context.WithCancel(context.Background())
	l := <-m.Acquire(ctx)
	require.NoError(t, l.Err())
	cancel()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, l.Err())
	st, err := m.Inspect(context.Background())
	require.NoError(t, err)
	require.True(t, st.Locked)
	require.NoError(t, l.Unlock(context.Background()))
}

// TestAcquireUnclaimedLeaseIsReleased: a Lease received from Acquire but not
// used before its context ended is released, and says so.
func TestAcquireUnclaimedLeaseIsReleased(t *testing.T) {
	e := standaloneEnv(t)
	m := e.client(t).Mutex(t.Name())
	ctx, cancel := context.WithCancel(context.Background())
	ch := m.Acquire(ctx)
	eventually(t, 5*time.Second, func() bool { return len(ch) == 1 }, "no lease delivered")
	cancel()
	eventually(t, 5*time.Second, func() bool {
		st, err := m.Inspect(context.Background())
		return err == nil && !st.Locked
	}, "the unclaimed lease was not released")
	l := <-ch
	require.ErrorIs(t, l.Err(), context.Canceled)
	require.ErrorIs(t, l.Unlock(context.Background()), ErrNotHeld)
}

// TestLeaseDetachedUnderReentry: a lease detached while a re-entry of its
// ownership is live leaves its hold to expire once that re-entry unlocks:
// the Client stops renewing the lock then, and does not release it on
// Close. Rather than renew the detached hold for ever, which kept the lock
// from everybody.
func TestLeaseDetachedUnderReentry(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c := e.client(t, WithWatchdogLease(600*time.Millisecond))
		m := c.Mutex(t.Name())
		l := mustLock(t, ctx, m.Lock)
		child := mustLock(t, l.Context(), m.Lock)
		require.NoError(t, l.Detach())
		require.NoError(t, child.Err(), "the re-entry holds on after its parent detached")
		requireHeld(t, m, child, 2)
		require.NoError(t, child.Unlock(ctx))
		other := e.client(t).Mutex(t.Name())
		eventually(t, 3*time.Second, func() bool {
			l, err := other.TryLock(ctx)
			if err != nil {
				return false
			}
			require.NoError(t, l.Unlock(ctx))
			return true
		}, "the detached hold is still renewed after the last re-entry unlocked")
	})
}

// An Unlock whose context had ended sends nothing: it returns the
// context's error and the lease still holds, renewed by the watchdog, so
// that a retry reports what Redis says then. When the lock was lost
// meanwhile (forced, and taken by another owner), the retry returns
// ErrNotHeld: no release of the first call reached Redis to free it
// before. A Group's members stay held and renewed the same way.
func TestUnlockWithEndedContextSendsNothing(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		done, cancel := context.WithCancel(ctx)
		cancel()
		c := e.client(t, WithWatchdogLease(600*time.Millisecond))
		other := e.client(t)
		name := "{" + t.Name() + "}"

		l := mustLock(t, ctx, c.Mutex(name+":m").Lock)
		require.ErrorIs(t, l.Unlock(done), context.Canceled)
		require.NoError(t, l.Err())
		forced, err := other.Mutex(name + ":m").ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, forced)
		ol := mustLock(t, ctx, other.Mutex(name+":m").Lock)
		select {
		case <-l.Lost():
		case <-time.After(10 * time.Second):
			t.Fatal("the forced lease was not reported lost")
		}
		err = l.Unlock(ctx)
		require.ErrorIs(t, err, ErrNotHeld, "a retry of an Unlock that sent nothing reported the lock freed by it")
		require.NoError(t, ol.Unlock(ctx))

		g := NewGroup(c.Mutex(name+":a"), c.Mutex(name+":b"))
		gl := mustLock(t, ctx, g.Lock)
		require.ErrorIs(t, gl.Unlock(done), context.Canceled)
		// Two leases later, the members are still held: renewed.
		time.Sleep(1200 * time.Millisecond)
		require.NoError(t, gl.Err())
		_, err = other.Mutex(name + ":a").TryLock(ctx)
		require.ErrorIs(t, err, ErrLocked, "a member of the group was let go by an Unlock that sent nothing")
		require.NoError(t, gl.Unlock(ctx))
		ol = mustLock(t, ctx, other.Mutex(name+":a").TryLock)
		require.NoError(t, ol.Unlock(ctx))
	})
}
