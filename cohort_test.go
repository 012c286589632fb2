package redisync

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// warm locks and unlocks m once, then waits a few milliseconds: the first
// acquisition of a lock without a hash in Redis takes a token from the
// server's clock, and a block of tokens after it only when the clock has
// moved on that far.
func warm(t testing.TB, ctx context.Context, m *Mutex) {
	t.Helper()
	l := mustLock(t, ctx, m.Lock)
	require.NoError(t, l.Unlock(ctx))
	time.Sleep(5 * time.Millisecond)
}

// localWaiters is the number of goroutines that wait for m in its Client.
func localWaiters(m *Mutex) int {
	co := m.c.knownCohort(m.keys.lock)
	if co == nil {
		return 0
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	return len(co.waiters)
}

func TestMutexLocalPass(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		var passed, acquired atomic.Int64
		c := e.client(t, WithMetrics(Metrics{
			PassedOn: func(string, string, time.Duration) { passed.Add(1) },
			Acquired: func(string, string, time.Duration) { acquired.Add(1) },
		}))
		m := c.Mutex(t.Name(), WithLocalPasses(DefaultLocalPasses, time.Minute))
		warm(t, ctx, m)
		next := mustLock(t, ctx, m.Lock)
		require.Equal(t, int64(2), acquired.Load())
		_, lease2, _ := holdAndQueueFrom(t, ctx, m, next, 3)
		prev := next
		for i := 0; i < 3; i++ {
			require.NoError(t, prev.Unlock(ctx))
			require.ErrorIs(t, prev.Unlock(ctx), ErrNotHeld, "a lease passed on must not release its successor's hold")
			require.ErrorIs(t, prev.Err(), ErrReleased)
			nl := <-lease2
			require.NoError(t, nl.Err())
			require.Greater(t, nl.Token(), prev.Token())
			require.Same(t, prev.h, nl.h)
			st := requireHeldBy(t, m, nl)
			require.Equal(t, c.ID(), st.ClientID())
			prev = nl
		}
		require.Equal(t, int64(3), passed.Load())
		require.Equal(t, int64(2), acquired.Load())
		require.NoError(t, prev.Unlock(ctx))
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.False(t, st.Locked)

		// Another Client's next token comes after every token passed on.
		other := e.client(t).Mutex(t.Name())
		ol := mustLock(t, ctx, other.Lock)
		require.Greater(t, ol.Token(), prev.Token())
		require.NoError(t, ol.Unlock(ctx))
	})
}

// holdAndQueueFrom queues n waiters for m, held by l.
func holdAndQueueFrom(t *testing.T, ctx context.Context, m *Mutex, l *Lease, n int) (*Lease, chan *Lease, chan error) {
	t.Helper()
	leases, errs := make(chan *Lease, n), make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			nl, err := m.Lock(ctx)
			if err != nil {
				errs <- err
				return
			}
			leases <- nl
		}()
		// One at a time, so that they queue in order.
		eventually(t, 10*time.Second, func() bool { return localWaiters(m) == i+1 }, "the waiter did not queue in the Client")
	}
	return l, leases, errs
}

// requireHeldBy checks that m is held by the Client of l, through the
// ownership l shares.
func requireHeldBy(t testing.TB, m *Mutex, l *Lease) MutexState {
	t.Helper()
	st, err := m.Inspect(context.Background())
	require.NoError(t, err)
	require.True(t, st.Locked)
	require.Equal(t, l.h.owner, st.Owner)
	require.LessOrEqual(t, st.Token, l.Token())
	return st
}

func TestMutexLocalPassBudget(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c := e.client(t)
		m := c.Mutex(t.Name(), WithLocalPasses(2, time.Minute))
		warm(t, ctx, m)
		l := mustLock(t, ctx, m.Lock)
		_, leases, _ := holdAndQueueFrom(t, ctx, m, l, 5)
		// Nobody waits in Redis: a spent budget gets a new one there, with
		// new tokens, and the lock stays with the Client.
		for i := 0; i < 5; i++ {
			require.NoError(t, l.Unlock(ctx))
			nl := <-leases
			require.NoError(t, nl.Err())
			require.Equal(t, l.h.owner, nl.h.owner, "pass %d", i)
			require.Greater(t, nl.Token(), l.Token())
			l = nl
		}
		require.NoError(t, l.Unlock(ctx))
		ol := mustLock(t, ctx, e.client(t).Mutex(t.Name()).Lock)
		require.Greater(t, ol.Token(), l.Token())
		require.NoError(t, ol.Unlock(ctx))
	})
}

func TestMutexLocalPassOptOut(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		var passed atomic.Int64
		c := e.client(t, WithMetrics(Metrics{PassedOn: func(string, string, time.Duration) { passed.Add(1) }}))
		m := c.Mutex(t.Name(), WithLocalPasses(0, 0))
		l := mustLock(t, ctx, m.Lock)
		got := make(chan *Lease, 1)
		go func() {
			nl, err := m.Lock(ctx)
			if err == nil {
				got <- nl
			}
		}()
		eventually(t, 10*time.Second, func() bool {
			st, err := m.Inspect(ctx)
			return err == nil && st.Waiters == 1
		}, "the waiter did not queue in Redis")
		require.Equal(t, 0, localWaiters(m))
		require.NoError(t, l.Unlock(ctx))
		nl := <-got
		require.NotEqual(t, l.h.owner, nl.h.owner)
		require.NoError(t, nl.Unlock(ctx))
		require.Zero(t, passed.Load())

		for _, o := range []LockOption{WithLocalPasses(-1, time.Second), WithLocalPasses(1, 0), WithLocalPasses(maxLocalPasses+1, time.Second)} {
			_, err := c.Mutex(t.Name(), o).Lock(ctx)
			require.ErrorIs(t, err, ErrInvalidArgument)
		}
		_, err := c.FairMutex(t.Name(), WithLocalPasses(1, time.Second)).Lock(ctx)
		require.ErrorIs(t, err, ErrInvalidArgument)
	})
}

func TestMutexLocalWaiterCancelled(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c := e.client(t)
		m := c.Mutex(t.Name())
		l := mustLock(t, ctx, m.Lock)
		wctx, cancel := context.WithCancel(ctx)
		waiter := lockAsync(wctx, m)
		eventually(t, 10*time.Second, func() bool { return localWaiters(m) == 1 }, "the waiter did not queue in the Client")
		cancel()
		require.ErrorIs(t, (<-waiter).err, context.Canceled)
		require.NoError(t, l.Unlock(ctx))
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.False(t, st.Locked)
		require.Empty(t, c.knownCohorts())
	})
}

// TestMutexLocalPassLoss: a loss of the Client's hold reaches the
// goroutine the lock was passed on to, not the one that passed it on.
func TestMutexLocalPassLoss(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c := e.client(t)
		m := c.Mutex(t.Name(), WithLocalPasses(DefaultLocalPasses, time.Minute))
		warm(t, ctx, m)
		l := mustLock(t, ctx, m.Lock)
		_, leases, _ := holdAndQueueFrom(t, ctx, m, l, 1)
		require.NoError(t, l.Unlock(ctx))
		nl := <-leases
		require.Same(t, l.h, nl.h)
		ok, err := m.ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		select {
		case <-nl.Lost():
		case <-time.After(20 * time.Second):
			t.Fatal("the loss did not reach the current holder")
		}
		require.ErrorIs(t, nl.Err(), ErrForceUnlocked)
		select {
		case <-l.Lost():
			t.Fatal("a lease passed on reported the loss of its successor")
		default:
		}
		require.ErrorIs(t, l.Err(), ErrReleased)
		// The next acquisition goes to Redis again, before the lost lease's
		// Unlock.
		again := mustLock(t, ctx, m.Lock)
		require.Greater(t, again.Token(), nl.Token())
		require.ErrorIs(t, nl.Unlock(ctx), ErrNotHeld)
		require.NoError(t, again.Unlock(ctx))
	})
}

// TestMutexLocalPassReentry: re-entering a lease passed on locally adds
// a hold in Redis, and the lock is not passed on while the re-entry holds.
func TestMutexLocalPassReentry(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		// Also on a Client that learns of changes only on renewal, given
		// a budget: no invalidation of the re-entry's own write voids its
		// block there, so only the re-entry itself keeps the pass back.
		eachDetection(t, e, testMutexLocalPassReentry)
	})
}

// eachDetection runs f with a Client of each LossDetection: from Dial,
// and from New without DetectChanges.
func eachDetection(t *testing.T, e *env, f func(t *testing.T, e *env, c *Client)) {
	t.Run("on change", func(t *testing.T) { f(t, e, e.client(t)) })
	t.Run("on renewal", func(t *testing.T) { f(t, e, e.renewalClient(t)) })
}

func testMutexLocalPassReentry(t *testing.T, e *env, c *Client) {
	ctx := withTimeout(t, 30*time.Second)
	m := c.Mutex(t.Name(), WithLocalPasses(DefaultLocalPasses, time.Minute))
	warm(t, ctx, m)
	l := mustLock(t, ctx, m.Lock)
	_, leases, _ := holdAndQueueFrom(t, ctx, m, l, 1)
	require.NoError(t, l.Unlock(ctx))
	nl := <-leases
	inner := mustLock(t, nl.Context(), m.Lock)
	require.Equal(t, nl.Token(), inner.Token())
	require.Equal(t, 2, requireHeldBy(t, m, inner).Holds)

	var wg sync.WaitGroup
	got := make(chan *Lease, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if l, err := m.Lock(ctx); err == nil {
			got <- l
		}
	}()
	eventually(t, 10*time.Second, func() bool { return localWaiters(m) == 1 }, "the waiter did not queue in the Client")
	require.NoError(t, nl.Unlock(ctx))
	st, err := m.Inspect(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Holds, "the re-entry still holds")
	select {
	case <-got:
		t.Fatal("passed on while a re-entry held the lock")
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, inner.Unlock(ctx))
	wg.Wait()
	last := <-got
	require.Greater(t, last.Token(), inner.Token())
	require.NoError(t, last.Unlock(ctx))
}

// A spent budget goes to another Client's waiter in Redis; a lock that a
// release in Redis hands over to a Client's waiter is passed on locally
// too: the waiter, which goroutines of its Client wait behind, asked for a
// block of tokens with its place in the queue, and the release reserved
// it. Another Client's next token comes after the block.
func TestMutexLocalPassAfterHandOver(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		var passed atomic.Int64
		c := e.client(t, WithMetrics(Metrics{PassedOn: func(string, string, time.Duration) { passed.Add(1) }}))
		m := c.Mutex(t.Name(), WithLocalPasses(1, time.Minute))
		warm(t, ctx, m)
		other := e.client(t).Mutex(t.Name())

		first := mustLock(t, ctx, m.Lock) // nobody waits behind it: no tokens
		theirs := make(chan *Lease, 1)
		go func() {
			l, err := other.Lock(ctx)
			if err != nil {
				t.Error(err)
			}
			theirs <- l
		}()
		eventually(t, 10*time.Second, func() bool { return queuedMutexWaiters(t, ctx, other.c, t.Name()) == 1 }, "the other Client's waiter did not queue")
		_, leases, _ := holdAndQueueFrom(t, ctx, m, first, 2)

		// Another Client waits in Redis: no new budget, the lock goes
		// there, and the first local waiter queues behind, asking for a
		// block.
		require.NoError(t, first.Unlock(ctx))
		ol := <-theirs
		require.NotNil(t, ol)
		require.Greater(t, ol.Token(), first.Token())
		require.Zero(t, passed.Load())
		eventually(t, 10*time.Second, func() bool { return queuedMutexWaiters(t, ctx, c, t.Name()) == 1 }, "the local leader did not queue")
		require.NoError(t, ol.Unlock(ctx))

		// Handed over with a block: the next Unlock passes it on locally.
		l2 := <-leases
		require.NoError(t, l2.Err())
		require.Greater(t, l2.Token(), ol.Token())
		require.NoError(t, l2.Unlock(ctx))
		l3 := <-leases
		require.NoError(t, l3.Err())
		require.Equal(t, int64(1), passed.Load(), "the lock handed over was not passed on locally")
		require.Equal(t, l2.h.owner, l3.h.owner)
		require.Greater(t, l3.Token(), l2.Token())
		requireHeldBy(t, m, l3)
		require.NoError(t, l3.Unlock(ctx))

		ol = mustLock(t, ctx, other.Lock)
		require.Greater(t, ol.Token(), l3.Token())
		require.NoError(t, ol.Unlock(ctx))
	})
}

// A goroutine that leads its Client's acquisition in Redis and gives up
// hands the lead to the next local waiter, which waits in Redis in its
// place: the local waiter, which has no timer of its own, is not left
// behind a lead nobody runs.
func TestMutexLocalLeaderCancelled(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c := e.client(t)
		m := c.Mutex(t.Name())
		other := e.client(t).Mutex(t.Name())
		held := mustLock(t, ctx, other.Lock)

		lctx, cancel := context.WithCancel(ctx)
		leader := lockAsync(lctx, m)
		eventually(t, 10*time.Second, func() bool { return queuedMutexWaiters(t, ctx, c, t.Name()) == 1 }, "the leader did not queue in Redis")
		follower := lockAsync(ctx, m)
		eventually(t, 10*time.Second, func() bool { return localWaiters(m) == 1 }, "the follower did not wait in the Client")

		cancel()
		require.ErrorIs(t, (<-leader).err, context.Canceled)
		eventually(t, 10*time.Second, func() bool { return queuedMutexWaiters(t, ctx, c, t.Name()) == 1 }, "the follower did not take the lead in Redis")
		require.NoError(t, held.Unlock(ctx))
		select {
		case o := <-follower:
			require.NoError(t, o.err)
			require.Greater(t, o.l.Token(), held.Token())
			require.NoError(t, o.l.Unlock(ctx))
		case <-time.After(5 * time.Second):
			t.Fatal("the follower still waits after the lock was released")
		}
	})
}
