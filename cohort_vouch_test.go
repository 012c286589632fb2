package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/redisync/redisync/internal/faultproxy"
	"github.com/stretchr/testify/require"
)

// The tests of when a lock may be passed on locally: only while the Client
// can vouch for its hold, and only with a block of tokens that nothing has
// moved the lock's token counter past.

// passedOnWithBlock has c's goroutines take the Mutex name, with a budget
// of local passes lasting a minute: the first takes it in Redis with
// nobody waiting behind it, then n goroutines queue in the Client, and its
// Unlock gets a new budget in Redis and passes the lock to the first of
// them. It returns the Mutex, that lease, which holds a block of tokens
// for local passes, and the channel the other n-1 get theirs on.
func passedOnWithBlock(t *testing.T, ctx context.Context, c *Client, name string, n int) (*Mutex, *Lease, chan *Lease) {
	t.Helper()
	m := c.Mutex(name, WithLocalPasses(DefaultLocalPasses, time.Minute))
	warm(t, ctx, m)
	l := mustLock(t, ctx, m.Lock)
	_, leases, _ := holdAndQueueFrom(t, ctx, m, l, n)
	require.NoError(t, l.Unlock(ctx))
	nl := recv(t, leases, 10*time.Second, "the first local waiter")
	require.Same(t, l.h, nl.h, "passed on locally")
	return m, nl, leases
}

// readForTracking reports whether the tracker of c has no read of h's key
// to come: it read it since it last changed.
func readForTracking(c *Client, h *holder) bool {
	tr := c.tracker
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, p := range tr.pending {
		if p.h == h {
			return false
		}
	}
	_, dirty := tr.dirty[h.key]
	return !dirty && !tr.all
}

// unlockAfter requires l's token to be greater than the one of earlier,
// an earlier holder's, and unlocks l.
func unlockAfter(t *testing.T, ctx context.Context, l, earlier *Lease, msgAndArgs ...any) {
	t.Helper()
	require.Greater(t, l.Token(), earlier.Token(), msgAndArgs...)
	require.NoError(t, l.Unlock(ctx))
}

// ran waits until a call r acted on ran in Redis, failing the test with
// msg after 10 s.
func ran(t *testing.T, r *replyRule, msg string) {
	t.Helper()
	select {
	case <-r.Ran():
	case <-time.After(10 * time.Second):
		t.Fatal(msg)
	}
}

// lastArg matches the calls of script s whose last argument is arg.
func lastArg(s script, arg string) func(cmd []string) bool {
	m := runs(s)
	return func(cmd []string) bool { return m(cmd) && cmd[len(cmd)-1] == arg }
}

// notDeliveredWhileHeld fails the test when ch delivers, within d, a Lease
// that reports itself held while theirs, another lease, holds the lock. It
// returns the Lease delivered, or nil.
func notDeliveredWhileHeld(t *testing.T, ch <-chan *Lease, theirs *Lease, d time.Duration) *Lease {
	t.Helper()
	select {
	case l := <-ch:
		if l.Err() == nil && theirs.Err() == nil {
			t.Fatalf("a Lease with token %d was delivered as held while another lease holds the lock with token %d", l.Token(), theirs.Token())
		}
		return l
	case <-time.After(d):
		return nil
	}
}

// then is the Lease l, or when nil, the one ch delivers, which must hold.
func then(t *testing.T, l *Lease, ch <-chan *Lease, what string) *Lease {
	t.Helper()
	if l != nil {
		require.NoError(t, l.Err(), what)
		return l
	}
	return recv(t, ch, 10*time.Second, what)
}

// passNotDeliveredAfterForce force-unlocks the Mutex of nl, a lease passed
// on locally whose Client may not have learnt of that yet, with force (a
// Mutex of that Client, or of another), has another Client take the lock,
// and unlocks nl: the next local waiter, on leases, gets no Lease held
// while the other Client holds the lock, and gets it once that Client
// unlocked it, with a greater token. before, when not nil, runs before
// nl's Unlock, and after once that waiter was seen not to get it. It
// returns the waiter's Lease, unlocked.
func passNotDeliveredAfterForce(t *testing.T, ctx context.Context, e *env, force *Mutex, nl *Lease, leases chan *Lease, before, after func()) *Lease {
	t.Helper()
	ok, err := force.ForceUnlock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	ol := mustLock(t, ctx, e.client(t).Mutex(force.Name()).TryLock)
	if before != nil {
		before()
	}
	_ = nl.Unlock(ctx) // its loss is reported, or not yet
	next := notDeliveredWhileHeld(t, leases, ol, 200*time.Millisecond)
	if after != nil {
		after()
	}
	require.NoError(t, ol.Unlock(ctx))
	next = then(t, next, leases, "the next local waiter")
	unlockAfter(t, ctx, next, ol)
	return next
}

// A Group that re-enters a Mutex through a lease of it raises the lock's
// token counter to the group's token: the lock is not passed on locally
// with the tokens reserved before, and the next holder's token is greater
// than the group's. Both with a group of one slot (one script) and with a
// group taken lock by lock (its tokens raised after).
func TestMutexLocalPassAfterGroupReentry(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		eachDetection(t, e, testMutexLocalPassAfterGroupReentry)
	})
}

func testMutexLocalPassAfterGroupReentry(t *testing.T, e *env, c *Client) {
	for _, atomic := range []bool{true, false} {
		t.Run(map[bool]string{true: "atomic", false: "ordered"}[atomic], func(t *testing.T) {
			ctx := withTimeout(t, 30*time.Second)
			name := "{" + t.Name() + "}"
			other := c.Mutex(name + ":other")
			if !atomic {
				other = e.client(t).Mutex(name + ":other") // a Group over two Clients
			}
			m, nl, leases := passedOnWithBlock(t, ctx, c, name, 2)
			g := NewGroup(m, other)
			require.Equal(t, atomic, g.atomic)
			gl := mustLock(t, nl.Context(), g.Lock)
			require.NoError(t, gl.Unlock(ctx))
			require.NoError(t, nl.Unlock(ctx))
			last := recv(t, leases, 10*time.Second, "the next local waiter")
			unlockAfter(t, ctx, last, gl, "the lock's token went back below the group's")

			ol := mustLock(t, ctx, e.client(t).Mutex(name).Lock)
			unlockAfter(t, ctx, ol, last)
		})
	}
}

// A re-entry whose hold is in Redis but whose reply has not come back is a
// hold of the ownership: the lock is not passed on locally meanwhile, and
// the goroutine waiting for it gets it only once the re-entry released
// it, with a greater token. The same for a Group that re-enters the lock
// with the lease's Context.
func TestMutexLocalPassWhileReentryInFlight(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		for _, group := range []bool{false, true} {
			t.Run(map[bool]string{false: "mutex", true: "group"}[group], func(t *testing.T) {
				ctx := withTimeout(t, 30*time.Second)
				c, rf := e.faultyClient(t)
				name := "{" + t.Name() + "}"
				m, nl, _ := passedOnWithBlock(t, ctx, c, name, 1)

				script, reenter := acquireScript, m.Acquire
				if group {
					script, reenter = groupAcquireScript, NewGroup(m, c.Mutex(name+":other")).Acquire
				}
				r, open := rf.gate(runs(script), 1, false)
				inner := reenter(context.WithoutCancel(nl.Context()))
				ran(t, r, "the re-entry did not run")

				got := m.Acquire(ctx)
				eventually(t, 10*time.Second, func() bool { return localWaiters(m) == 1 }, "the waiter did not queue in the Client")
				require.NoError(t, nl.Unlock(ctx))
				open()
				il := recv(t, inner, 10*time.Second, "the re-entry")
				last := notDeliveredWhileHeld(t, got, il, 100*time.Millisecond)
				require.NoError(t, il.Unlock(ctx))
				last = then(t, last, got, "the waiter")
				unlockAfter(t, ctx, last, il)
			})
		}
	})
}

// An invalidation of the lock's key says that its hash changed: the block
// of tokens reserved before is void, and the lock is not passed on locally
// while the Client checks what changed. So a lock force-unlocked and
// taken by another Client is not delivered to the next local waiter as
// held, even before the Client has learnt that it lost it.
func TestMutexLocalPassAfterChangeUnchecked(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c, rf := e.faultyClient(t)
		_, nl, leases := passedOnWithBlock(t, ctx, c, t.Name(), 3)
		eventually(t, 10*time.Second, func() bool { return readForTracking(c, nl.h) }, "the key was not read for tracking")
		time.Sleep(100 * time.Millisecond) // the read's reply is back

		// The check that follows the change is held back: the loss is not
		// known.
		r, open := rf.gate(lastArg(renewScript, "0"), -1, false)
		next := passNotDeliveredAfterForce(t, ctx, e, e.client(t).Mutex(t.Name()), nl, leases,
			func() { ran(t, r, "the Client did not check the lock after its change") }, open)
		last := recv(t, leases, 10*time.Second, "the last local waiter")
		unlockAfter(t, ctx, last, next)
	})
}

// A Client that learns of a loss only when it renews (New without
// DetectChanges) does not pass locks on locally unless asked to: its
// goroutines wait in Redis.
func TestMutexNoLocalPassesWithoutChangeDetection(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c := e.renewalClient(t)
		m := c.Mutex(t.Name())
		l := mustLock(t, ctx, m.Lock)
		got := m.Acquire(ctx)
		eventually(t, 10*time.Second, func() bool { return queuedMutexWaiters(t, ctx, c, t.Name()) == 1 }, "the waiter did not queue in Redis")
		require.Zero(t, localWaiters(m))
		require.NoError(t, l.Unlock(ctx))
		nl := recv(t, got, 10*time.Second, "the waiter")
		require.NotSame(t, l.h, nl.h)
		require.NoError(t, nl.Unlock(ctx))

		// Asked to, it passes them on.
		_, nl, _ = passedOnWithBlock(t, ctx, c, t.Name(), 1)
		require.NoError(t, nl.Unlock(ctx))
	})
}

// A local pass is delivered at most within (WithLocalPasses) after the
// command that confirmed the hold in Redis was sent: a new budget whose
// reply comes later than that is not passed on, and a lock taken by
// another Client meanwhile is not delivered as held, by a Client that
// learns of losses only when it renews.
func TestMutexLocalPassAfterLateBudget(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		const within = 200 * time.Millisecond
		c, rf := e.faultyClientDetecting(t, false)
		m := c.Mutex(t.Name(), WithLocalPasses(DefaultLocalPasses, within))
		warm(t, ctx, m)
		l := mustLock(t, ctx, m.Lock)
		_, leases, _ := holdAndQueueFrom(t, ctx, m, l, 1)

		// The Client asks for one token: its block serves one pass.
		r, open := rf.gate(lastArg(releaseScript, "1"), 1, false)
		unlocked := make(chan error, 1)
		go func() { unlocked <- l.Unlock(ctx) }()
		ran(t, r, "the Unlock did not ask for a new budget")
		other := e.client(t).Mutex(t.Name())
		ok, err := other.ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		ol := mustLock(t, ctx, other.TryLock)
		time.Sleep(within + 50*time.Millisecond)
		open()
		<-unlocked // its loss may be reported, or not
		next := notDeliveredWhileHeld(t, leases, ol, 200*time.Millisecond)
		require.NoError(t, ol.Unlock(ctx))
		next = then(t, next, leases, "the local waiter")
		unlockAfter(t, ctx, next, ol)
	})
}

// A Client that learns of a loss only when it renews (New without
// DetectChanges), given a budget of local passes, cannot vouch for its
// hold between two replies of Redis: it confirms every pass there (keep),
// so a lock force-unlocked and taken by another Client is not delivered to
// the next local waiter as held, with a token of a block reserved before
// the other Client's, even though the Client has not learnt of the loss.
func TestMutexLocalPassConfirmedWithoutChangeDetection(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c := e.renewalClient(t)
		_, nl, leases := passedOnWithBlock(t, ctx, c, t.Name(), 3)
		next := passNotDeliveredAfterForce(t, ctx, e, e.client(t).Mutex(t.Name()), nl, leases, nil, nil)
		last := recv(t, leases, 10*time.Second, "the last local waiter")
		unlockAfter(t, ctx, last, next)
	})
}

// A Client that force-unlocks a Mutex its goroutines pass on locally has
// seen the lock move: the block of tokens its cohort holds is void at
// once, whatever becomes of the invalidation Redis sends it (here lost on
// the way), and the next Unlock asks Redis, which finds the lock gone. So
// the lock, taken meanwhile by another Client, is not delivered to the
// next local waiter as held.
func TestMutexOwnForceUnlockVoidsLocalPasses(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		ps, err := newProxySet(e.addrs)
		require.NoError(t, err)
		t.Cleanup(ps.Close)
		c, err := Dial(ps.option(e.addrs), WithLogger(quietLogger()))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		require.Equal(t, DetectOnChange, c.LossDetection())
		m, nl, leases := passedOnWithBlock(t, ctx, c, t.Name(), 2)
		eventually(t, 10*time.Second, func() bool { return readForTracking(c, nl.h) }, "the key was not read for tracking")
		time.Sleep(100 * time.Millisecond) // the read's reply is back

		ps.each(func(p *faultproxy.Proxy) { p.DropInvalidations(1) })
		passNotDeliveredAfterForce(t, ctx, e, m, nl, leases, nil, nil)
	})
}
