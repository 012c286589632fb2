package redisync

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redisync/redisync/internal/faultproxy"
	"github.com/stretchr/testify/require"
)

// requireHeld checks that m is held through l, with holds holds, and
// returns its state.
func requireHeld(t testing.TB, m *Mutex, l *Lease, holds int) MutexState {
	t.Helper()
	st, err := m.Inspect(context.Background())
	require.NoError(t, err)
	require.True(t, st.Locked)
	require.Equal(t, holds, st.Holds)
	require.Equal(t, l.h.owner, st.Owner)
	require.Equal(t, l.Token(), st.Token)
	return st
}

func TestMutexLockUnlock(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		m := c.Mutex(t.Name())
		l := mustLock(t, ctx, m.Lock)
		require.NoError(t, l.Err())
		require.NotZero(t, l.Token())
		st := requireHeld(t, m, l, 1)
		require.Equal(t, c.ID(), st.ClientID())
		require.Greater(t, st.TTL, 20*time.Second)

		_, err := c.Mutex(t.Name()).TryLock(ctx)
		require.ErrorIs(t, err, ErrLocked)

		require.NoError(t, l.Unlock(ctx))
		require.ErrorIs(t, l.Err(), ErrReleased)
		require.ErrorIs(t, context.Cause(l.Context()), ErrReleased)
		require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
		st, err = m.Inspect(ctx)
		require.NoError(t, err)
		require.False(t, st.Locked)

		l2 := mustLock(t, ctx, m.TryLock)
		require.Greater(t, l2.Token(), l.Token())
		require.NoError(t, l2.Unlock(ctx))
	})
}

func TestMutexHandOff(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		a, b := e.client(t), e.client(t)
		l := mustLock(t, ctx, a.Mutex(t.Name()).Lock)
		got := b.Mutex(t.Name()).Acquire(ctx)
		time.Sleep(50 * time.Millisecond)
		select {
		case <-got:
			t.Fatal("acquired a held lock")
		default:
		}
		start := time.Now()
		require.NoError(t, l.Unlock(ctx))
		l2 := <-got
		require.NoError(t, l2.Err())
		require.Less(t, time.Since(start), 5*time.Second, "woken by the release, not the lease")
		require.Greater(t, l2.Token(), l.Token())
		require.NoError(t, l2.Unlock(ctx))
		e.requireNoSubscriptions(t)
	})
}

// serverMicros is the server's clock (TIME) in microseconds.
func serverMicros(t testing.TB, c *Client) uint64 {
	t.Helper()
	tm, err := c.rc.Do(context.Background(), c.rc.B().Time().Build()).AsStrSlice()
	require.NoError(t, err)
	s, err1 := strconv.ParseUint(tm[0], 10, 64)
	us, err2 := strconv.ParseUint(tm[1], 10, 64)
	require.NoError(t, err1)
	require.NoError(t, err2)
	return s*1_000_000 + us
}

// queueMark is the field q of m's lock hash (see lua/lock.lua).
func queueMark(t testing.TB, c *Client, m *Mutex) string {
	t.Helper()
	q, err := c.rc.Do(context.Background(), c.rc.B().Hget().Key(m.keys.lock).Field("q").Build()).ToString()
	require.NoError(t, err)
	return q
}

// queueOf is m's queue: its waiters with their arrival numbers.
func queueOf(t testing.TB, c *Client, m *Mutex) []rueidis.ZScore {
	t.Helper()
	zs, err := c.rc.Do(context.Background(), c.rc.B().Zrange().Key(m.keys.queue).Min("0").Max("-1").Withscores().Build()).AsZScores()
	require.NoError(t, err)
	return zs
}

// pttl is the PTTL of key: -2 when there is no such key, -1 when it does
// not expire.
func pttl(t testing.TB, c *Client, key string) int64 {
	t.Helper()
	ms, err := c.rc.Do(context.Background(), c.rc.B().Pttl().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	return ms
}

// Tokens count up by one from the server's clock while the lock's hash
// keeps the last one; a lock whose hash expired starts from the clock again.
func TestMutexTokensCountUpFromTheClock(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		m := c.Mutex(t.Name())
		del := func() {
			t.Helper()
			require.NoError(t, c.rc.Do(ctx, c.rc.B().Del().Key(m.keys.lock).Build()).Error())
		}
		del() // a lock that never had a hash, or whose hash expired
		before := serverMicros(t, c)
		l1 := mustLock(t, ctx, m.Lock)
		require.GreaterOrEqual(t, l1.Token(), before, "a lock's first token is the server's clock")
		require.LessOrEqual(t, l1.Token(), serverMicros(t, c))
		require.NoError(t, l1.Unlock(ctx))
		l2 := mustLock(t, ctx, m.Lock)
		require.Equal(t, l1.Token()+1, l2.Token(), "the next token is the last one plus one")
		require.NoError(t, l2.Unlock(ctx))

		del() // as if the free lock's hash had expired
		before = serverMicros(t, c)
		l3 := mustLock(t, ctx, m.Lock)
		require.GreaterOrEqual(t, l3.Token(), before, "after the hash expired, the clock again")
		require.Greater(t, l3.Token(), l2.Token())
		require.NoError(t, l3.Unlock(ctx))
	})
}

// slowWaiter is a waiter queued behind a holder of another Client, whose
// own Client reaches Redis through a proxy (to be slowed down), and a
// third Client with its Mutex to look at the lock.
type slowWaiter struct {
	held   *Lease
	got    <-chan *Lease
	waiter *Client
	proxy  *faultproxy.Proxy
	c      *Client
	m      *Mutex
}

func queueSlowWaiter(t *testing.T, e *env, opts ...LockOption) slowWaiter {
	t.Helper()
	ctx := context.Background()
	a, c := e.client(t), e.client(t)
	b, p := e.proxied(t)
	w := slowWaiter{waiter: b, proxy: p, c: c, m: c.Mutex(t.Name())}
	w.held = mustLock(t, ctx, a.Mutex(t.Name()).Lock)
	w.got = b.Mutex(t.Name(), opts...).Acquire(ctx)
	eventually(t, 5*time.Second, func() bool { return len(queueOf(t, c, w.m)) == 1 }, "the waiter did not queue")
	return w
}

// A lock taken when its hash had expired while a waiter was queued (its
// holder died) knows the queue: its release hands the lock to the waiter,
// and the last hand-off tells the lock that nobody waits any more.
func TestMutexQueueOutlivesTheLockHash(t *testing.T) {
	e := ownServer(t)
	ctx := context.Background()
	// The waiter's Client is slowed down below, so that it cannot take the
	// lock found free itself.
	w := queueSlowWaiter(t, e)
	held, got, b, p, c, m := w.held, w.got, w.waiter, w.proxy, w.c, w.m
	require.Equal(t, "1", queueMark(t, c, m), "a waiter's arrival marks the lock")
	p.SetLatency(2 * time.Second)

	// The holder's hash goes, as when its lease runs out; its queue stays.
	require.NoError(t, c.rc.Do(ctx, c.rc.B().Del().Key(m.keys.lock).Build()).Error())
	requireLost(t, held, 5*time.Second, ErrExpired)
	l := mustLock(t, ctx, m.TryLock)
	require.Equal(t, "1", queueMark(t, c, m), "a hash made anew looks at the queue")
	require.NoError(t, l.Unlock(ctx))
	st, err := m.Inspect(ctx)
	require.NoError(t, err)
	require.True(t, st.Locked, "the release handed the lock over")
	require.Equal(t, b.ID(), st.ClientID())
	require.Equal(t, "", queueMark(t, c, m), "the hand-off emptied the queue")

	p.SetLatency(0)
	l2 := <-got
	require.NoError(t, l2.Err())
	require.Equal(t, l.Token()+1, l2.Token())
	require.NoError(t, l2.Unlock(ctx))
}

// The queue numbers its waiters in arrival order from the clock, and knows
// after a hand-off whether somebody may still wait: when a later arrival
// left, the lock keeps saying so until a release finds the queue empty,
// which removes the queue's keys.
func TestMutexQueueNumbersArrivals(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		m := c.Mutex(t.Name())
		held := mustLock(t, ctx, e.client(t).Mutex(t.Name()).Lock)
		require.Equal(t, "", queueMark(t, c, m), "nobody waits")
		before := float64(serverMicros(t, c))
		first := e.client(t).Mutex(t.Name()).Acquire(ctx)
		eventually(t, 5*time.Second, func() bool { return len(queueOf(t, c, m)) == 1 }, "the first waiter did not queue")
		after := float64(serverMicros(t, c))
		n1 := queueOf(t, c, m)[0].Score
		require.GreaterOrEqual(t, n1, before, "a new queue numbers its first arrival from the clock")
		require.LessOrEqual(t, n1, after)
		require.Positive(t, pttl(t, c, m.keys.queue), "a new queue expires")

		lctx, leave := context.WithCancel(ctx)
		second := e.client(t).Mutex(t.Name()).Acquire(lctx)
		eventually(t, 5*time.Second, func() bool { return len(queueOf(t, c, m)) == 2 }, "the second waiter did not queue")
		require.Equal(t, n1+1, queueOf(t, c, m)[1].Score, "the next arrival counts up")
		leave()
		require.ErrorIs(t, (<-second).Err(), context.Canceled, "the second waiter gave up")
		eventually(t, 5*time.Second, func() bool { return len(queueOf(t, c, m)) == 1 }, "the second waiter did not leave")

		require.NoError(t, held.Unlock(ctx))
		l := <-first
		require.NoError(t, l.Err())
		require.Equal(t, held.Token()+1, l.Token())
		require.Equal(t, "1", queueMark(t, c, m), "an arrival after the one handed the lock may still wait")
		require.Equal(t, int64(-2), pttl(t, c, m.keys.queue), "the hand-off emptied the queue")

		require.NoError(t, l.Unlock(ctx))
		require.Equal(t, "", queueMark(t, c, m), "the release found nobody waiting")
		eventually(t, 5*time.Second, func() bool { return pttl(t, c, m.keys.waiters) == -2 }, "the waiters hash outlived the queue")
	})
}

// A waiter that is woken rather than handed the lock (a fixed lease) keeps
// its place, with its number, until it comes for the lock; the queue that
// went with it when it was alone gets an expiry again.
func TestMutexWokenWaiterKeepsItsPlace(t *testing.T) {
	e := ownServer(t)
	ctx := context.Background()
	// The waiter's Client is slowed down below, so that the queue can be
	// read between its wake-up and its attempt.
	w := queueSlowWaiter(t, e, WithFixedLease(10*time.Second))
	held, got, p, c, m := w.held, w.got, w.proxy, w.c, w.m
	place := queueOf(t, c, m)[0]
	p.SetLatency(2 * time.Second)

	require.NoError(t, held.Unlock(ctx))
	st, err := m.Inspect(ctx)
	require.NoError(t, err)
	require.False(t, st.Locked, "a waiter with a fixed lease is woken, not handed the lock")
	require.Equal(t, []rueidis.ZScore{place}, queueOf(t, c, m), "the woken waiter keeps its place")
	require.Positive(t, pttl(t, c, m.keys.queue), "the queue expires again")
	require.Equal(t, "1", queueMark(t, c, m))

	p.SetLatency(0)
	l := <-got
	require.NoError(t, l.Err())
	require.Equal(t, held.Token()+1, l.Token())
	require.Empty(t, queueOf(t, c, m), "the waiter left the queue with the lock")
	require.NoError(t, l.Unlock(ctx))
}

func TestMutexLostOnDelete(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.client(t, WithWatchdogLease(600*time.Millisecond)).Mutex(t.Name())
		l := mustLock(t, ctx, m.Lock)
		ok, err := m.ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		requireLost(t, l, 5*time.Second, ErrExpired)
		require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
	})
}

func TestMutexReentrant(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.client(t).Mutex(t.Name())
		l1 := mustLock(t, ctx, m.Lock)
		l2 := mustLock(t, l1.Context(), m.Lock)
		require.Equal(t, l1.Token(), l2.Token())
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, st.Holds)
		require.NoError(t, l2.Unlock(ctx))
		st, _ = m.Inspect(ctx)
		require.True(t, st.Locked)
		require.Equal(t, 1, st.Holds)
		require.NoError(t, l1.Unlock(ctx))
		st, _ = m.Inspect(ctx)
		require.False(t, st.Locked)
	})
}

func TestMutexFixedLeaseExpires(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.client(t).Mutex(t.Name(), WithFixedLease(400*time.Millisecond))
		l := mustLock(t, ctx, m.Lock)
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.LessOrEqual(t, st.TTL, 400*time.Millisecond)
		requireLost(t, l, 5*time.Second, ErrExpired)
		// Lost closes before the key expires, so nobody has it yet.
		// Then the lock is free once the lease is over.
		other := e.client(t).Mutex(t.Name())
		eventually(t, 5*time.Second, func() bool {
			l2, err := other.TryLock(ctx)
			if err != nil {
				return false
			}
			require.Greater(t, l2.Token(), l.Token(), "tokens grow across an expiry")
			require.NoError(t, l2.Unlock(ctx))
			return true
		}, "lock not free after its lease")
		require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
	})
}

func TestMutexWatchdogKeepsLeaseAlive(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, WithWatchdogLease(300*time.Millisecond))
		m := c.Mutex(t.Name())
		l := mustLock(t, ctx, m.Lock)
		select {
		case <-l.Lost():
			t.Fatalf("lost: %v", l.Err())
		case <-time.After(1500 * time.Millisecond): // five leases
		}
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.True(t, st.Locked)
		require.Greater(t, st.TTL, time.Duration(0))
		require.NoError(t, l.Unlock(ctx))
		c.watchdog.mu.Lock()
		n := len(c.watchdog.holders)
		c.watchdog.mu.Unlock()
		require.Zero(t, n, "a released lease is never renewed again")
		time.Sleep(300 * time.Millisecond)
		st, err = m.Inspect(ctx)
		require.NoError(t, err)
		require.False(t, st.Locked)
	})
}

// idle reports whether w sleeps with nothing to watch.
func (w *watchdog) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.holders) == 0 && time.Until(w.sleepUntil) > time.Minute
}

// TestWatchdogRenewsALeaseTakenWhileIdle: a lock taken after the Client's
// watchdog went to sleep with nothing to watch is renewed a third into its
// lease, as every lease is, and a fixed lease taken then is checked as
// often: the sleeping watchdog is brought forward to the first renewal,
// not to the lease's end, where it could only report the lease lost.
func TestWatchdogRenewsALeaseTakenWhileIdle(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.renewalClient(t, WithWatchdogLease(600*time.Millisecond))
		admin := e.rueidisClient(t)
		idle := func() {
			t.Helper()
			require.Eventually(t, c.watchdog.idle, 5*time.Second, time.Millisecond, "the watchdog never slept with nothing to watch")
		}
		m := c.Mutex(t.Name())
		require.NoError(t, mustLock(t, ctx, m.Lock).Unlock(ctx))
		idle()
		l := mustLock(t, ctx, m.Lock)
		select {
		case <-l.Lost():
			t.Fatalf("lost: %v", l.Err())
		case <-time.After(1500 * time.Millisecond): // five leases
		}
		require.NoError(t, l.Unlock(ctx))

		idle()
		fixed := c.Mutex(t.Name()+"/fixed", WithFixedLease(time.Minute))
		l = mustLock(t, ctx, fixed.Lock)
		require.NoError(t, admin.Do(ctx, admin.B().Del().Key(fixed.keys.lock).Build()).Error())
		lostWithin(t, l, time.Now(), 5*time.Second)
		require.ErrorIs(t, l.Err(), ErrExpired)
	})
}

func TestMutexWaiterWakesAtTTLWhenHolderDies(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		takesLockOfDeadHolder(t, e, func(c *Client, opts ...LockOption) func(context.Context) (*Lease, error) {
			return c.Mutex(t.Name(), opts...).Lock
		})
	})
}

// takesLockOfDeadHolder checks that a waiter gets a lock whose holder died
// soon after the holder's lease runs out: a holder that dies publishes
// nothing. lock makes the lock of a Client with opts.
func takesLockOfDeadHolder(t *testing.T, e *env, lock func(c *Client, opts ...LockOption) func(context.Context) (*Lease, error)) {
	t.Helper()
	ctx := withTimeout(t, time.Minute)
	mustLock(t, ctx, lock(e.client(t), WithFixedLease(500*time.Millisecond)))
	start := time.Now()
	l := mustLock(t, ctx, lock(e.client(t)))
	require.Less(t, time.Since(start), 5*time.Second)
	require.NoError(t, l.Unlock(ctx))
}

func TestMutexRetriedUnlock(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		a, b := e.client(t), e.client(t)
		m := a.Mutex(t.Name())
		outer := mustLock(t, ctx, m.Lock)
		inner := mustLock(t, outer.Context(), m.Lock)

		// The inner release reaches Redis but its reply is lost; the retry
		// must not take a second hold.
		st, err := a.release(ctx, m.keys, outer.h.owner, inner.hold)
		require.NoError(t, err)
		require.Equal(t, stillHeld, st)
		require.NoError(t, inner.Unlock(ctx))
		s, _ := m.Inspect(ctx)
		require.Equal(t, 1, s.Holds)

		// The final release reaches Redis, its reply is lost, another client
		// takes the lock: the retry reports success and leaves b's lock alone.
		st, err = a.release(ctx, m.keys, outer.h.owner, outer.hold)
		require.NoError(t, err)
		require.Equal(t, freed, st)
		lb := mustLock(t, ctx, b.Mutex(t.Name()).TryLock)
		require.NoError(t, outer.Unlock(ctx))
		s, _ = m.Inspect(ctx)
		require.True(t, s.Locked)
		require.Equal(t, b.ID(), s.ClientID())
		require.NoError(t, lb.Unlock(ctx))
	})
}

func TestMutexNestedCodeReenters(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		m := e.client(t).Mutex(t.Name())
		ctx := withTimeout(t, 10*time.Second)
		require.NoError(t, nested(ctx, m.Lock, 5, func() {
			st, err := m.Inspect(ctx)
			require.NoError(t, err)
			require.Equal(t, 5, st.Holds)
		}))
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.False(t, st.Locked)
		// Another client's context does not re-enter.
		l := mustLock(t, ctx, m.Lock)
		_, err = e.client(t).Mutex(t.Name()).TryLock(l.Context())
		require.ErrorIs(t, err, ErrLocked)
		require.NoError(t, l.Unlock(ctx))
	})
}

func TestMutexReentryLostWithOwner(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.client(t, WithWatchdogLease(600*time.Millisecond)).Mutex(t.Name())
		outer := mustLock(t, ctx, m.Lock)
		inner := mustLock(t, outer.Context(), m.Lock)
		require.NoError(t, outer.Unlock(ctx), "releasing out of order keeps the inner hold")
		s, _ := m.Inspect(ctx)
		require.True(t, s.Locked)
		_, err := m.ForceUnlock(ctx)
		require.NoError(t, err)
		select {
		case <-inner.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("inner lease not lost")
		}
		require.ErrorIs(t, context.Cause(inner.Context()), ErrExpired)
		require.ErrorIs(t, outer.Err(), ErrReleased)
	})
}

func TestMutexMutualExclusion(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const clients, perClient, rounds = 4, 4, 40
		ctx := withTimeout(t, 2*time.Minute)
		counterKey := "counter:" + t.Name()
		rc := e.rueidisClient(t)
		overlaps := contend(t, ctx, e, clients, perClient, rounds, func(c *Client) func(context.Context) (*Lease, error) {
			return c.Mutex(t.Name()).Lock
		}, func() {
			// A read-modify-write only the lock protects.
			n, _ := rc.Do(ctx, rc.B().Get().Key(counterKey).Build()).AsInt64()
			rc.Do(ctx, rc.B().Set().Key(counterKey).Value(strconv.FormatInt(n+1, 10)).Build())
		})
		n, err := rc.Do(ctx, rc.B().Get().Key(counterKey).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, overlaps, "overlapping holders")
		require.EqualValues(t, clients*perClient*rounds, n, "lost updates")
		rc.Do(ctx, rc.B().Del().Key(counterKey).Build())
	})
}

// contend runs perClient goroutines on each of clients Clients of e, each
// taking the lock that lock makes of its Client rounds times and running
// critical while it holds it. It returns how many acquisitions found
// another holder inside.
func contend(t *testing.T, ctx context.Context, e *env, clients, perClient, rounds int,
	lock func(c *Client) func(context.Context) (*Lease, error), critical func()) int32 {
	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	for _, acquire := range onClients(t, e, clients, lock) {
		for range perClient {
			wg.Go(func() {
				for range rounds {
					l, err := acquire(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					critical()
					inside.Add(-1)
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	return overlaps.Load()
}

func TestMutexOneSubscriptionWakesOneWaiter(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const waiters = 20
		ctx := withTimeout(t, time.Minute)
		holder := e.client(t)
		l := mustLock(t, ctx, holder.Mutex(t.Name()).Lock)
		c := e.client(t)
		// Every waiter in the queue in Redis, none waiting in the Client.
		m := c.Mutex(t.Name(), WithLocalPasses(0, 0))
		results := make([]<-chan *Lease, waiters)
		for i := range results {
			results[i] = m.Acquire(ctx)
		}
		channel := waiterChannel(m.keys.channel, c.id)
		eventually(t, 5*time.Second, func() bool {
			return subscribed(c, channel, waiters)
		}, "waiters did not subscribe")
		require.Equal(t, []string{channel}, e.channels(t), "one subscription for all waiters")

		before := scriptCalls(t, e)
		require.NoError(t, l.Unlock(ctx))
		unlockAll(t, ctx, results, time.Minute)
		// Script runs: the releases (waiters + 1) and the acquire attempts.
		attempts := scriptCalls(t, e) - before - (waiters + 1)
		// About one attempt per grant when each release wakes one waiter; a
		// release that woke everyone would cost about waiters²/2.
		require.LessOrEqual(t, attempts, int64(waiters+waiters/2), "acquire attempts for %d grants", waiters)
		e.requireNoSubscriptions(t)
	})
}

// scriptCalls counts the script executions on the env's servers.
func scriptCalls(t testing.TB, e *env) int64 {
	t.Helper()
	var total int64
	for _, s := range e.masters() {
		calls := commandCalls(t, s)
		total += calls["evalsha"] + calls["eval"]
	}
	return total
}

// queuedMutexWaiters is the number of places in a Mutex's queue.
func queuedMutexWaiters(t testing.TB, ctx context.Context, c *Client, name string) int64 {
	t.Helper()
	st, err := c.Mutex(name).Inspect(ctx)
	require.NoError(t, err)
	return int64(st.Waiters)
}

// A release wakes the first waiter of the lock's queue only, whatever the
// number of clients waiting: one acquire attempt per grant.
func TestMutexReleaseWakesOneWaiterAcrossClients(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const clients, perClient = 8, 2
		ctx := withTimeout(t, time.Minute)
		holder := e.client(t)
		l := mustLock(t, ctx, holder.Mutex(t.Name()).Lock)
		var results []<-chan *Lease
		// Long expiries: no waiter comes back by itself meanwhile.
		// Every waiter in the queue in Redis, none waiting in its Client.
		waiting := func(c *Client) *Mutex {
			return c.Mutex(t.Name(), WithWaiterExpiry(time.Minute), WithLocalPasses(0, 0))
		}
		for _, m := range onClients(t, e, clients, waiting) {
			for range perClient {
				results = append(results, m.Acquire(ctx))
			}
		}
		eventually(t, 10*time.Second, func() bool {
			return queuedMutexWaiters(t, ctx, holder, t.Name()) == clients*perClient
		}, "waiters did not queue")
		// Let every waiter's subscription take effect and its look again end.
		time.Sleep(200 * time.Millisecond)

		before := scriptCalls(t, e)
		require.NoError(t, l.Unlock(ctx))
		unlockAll(t, ctx, results, time.Minute)
		waiters := int64(clients * perClient)
		attempts := scriptCalls(t, e) - before - (waiters + 1)
		t.Logf("%d acquire attempts for %d grants to waiters of %d clients", attempts, waiters, clients)
		require.LessOrEqual(t, attempts, waiters+2)
		k := holder.keysFor(t.Name())
		n, err := holder.rc.Do(ctx, holder.rc.B().Exists().Key(k.queue, k.waiters).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, n, "queue keys left")
	})
}

// A waiter that died at the head of the queue does not hold the others
// back for longer than its place's expiry: the lock handed over to it
// expires that soon, and the others come back and take it.
func TestMutexDeadWaiterPassedOver(t *testing.T) {
	e := ownServer(t)
	ctx := withTimeout(t, time.Minute)
	const expiry = 3 * time.Second
	dead, p := e.proxied(t)
	holder, next := e.client(t), e.client(t)

	l := mustLock(t, ctx, holder.Mutex("dead-waiter").Lock)
	first := dead.Mutex("dead-waiter", WithWaiterExpiry(expiry)).Acquire(ctx)
	eventually(t, 5*time.Second, func() bool { return queuedMutexWaiters(t, ctx, holder, "dead-waiter") == 1 }, "first waiter did not queue")
	second := next.Mutex("dead-waiter", WithWaiterExpiry(expiry)).Acquire(ctx)
	eventually(t, 5*time.Second, func() bool { return queuedMutexWaiters(t, ctx, holder, "dead-waiter") == 2 }, "second waiter did not queue")
	p.Blackhole() // the first waiter is gone
	require.NoError(t, l.Unlock(ctx))
	released := time.Now()
	nl := recv(t, second, 20*time.Second, "second waiter behind a dead one")
	took := time.Since(released)
	t.Logf("second waiter acquired %v after the release handed the lock to a dead first waiter (expiry %v)", took, expiry)
	require.Less(t, took, expiry+2*time.Second)
	require.NoError(t, nl.Unlock(ctx))
	p.Heal()
	fl := <-first
	if fl.Err() == nil {
		require.NoError(t, fl.Unlock(ctx))
	}
}

// A release hands the lock to the first waiter with a lease no longer than
// the waiter's place lives; the new holder's watchdog renews the full lease
// a third into that one, so the lease outlives it: when the watchdog had
// nothing to renew, and when it sleeps until a later renewal (its Client
// holds another lock).
func TestMutexHandedOverLeaseRenewed(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		for _, other := range []bool{false, true} {
			t.Run(fmt.Sprintf("other lock held %v", other), func(t *testing.T) { testHandedOverLeaseRenewed(t, e, other) })
		}
	})
}

func testHandedOverLeaseRenewed(t *testing.T, e *env, holdOther bool) {
	const expiry = time.Second
	ctx := withTimeout(t, time.Minute)
	holder := e.client(t)
	l := mustLock(t, ctx, holder.Mutex(t.Name()).Lock)
	c := e.client(t, WithWatchdogLease(30*time.Second))
	if holdOther {
		other := mustLock(t, ctx, c.Mutex(t.Name()+":other").Lock)
		defer other.Unlock(ctx)
	}
	w := c.Mutex(t.Name(), WithWaiterExpiry(expiry)).Acquire(ctx)
	eventually(t, 5*time.Second, func() bool { return queuedMutexWaiters(t, ctx, holder, t.Name()) == 1 }, "waiter did not queue")
	time.Sleep(100 * time.Millisecond) // the waiter's look once subscribed
	require.NoError(t, l.Unlock(ctx))
	wl := <-w
	require.NoError(t, wl.Err())
	time.Sleep(2 * expiry)
	require.NoError(t, wl.Err(), "lease lost after the hand-over")
	st, err := holder.Mutex(t.Name()).Inspect(ctx)
	require.NoError(t, err)
	require.Equal(t, wl.Token(), st.Token)
	require.Greater(t, st.TTL, 20*time.Second, "the full lease was not renewed")
	require.NoError(t, wl.Unlock(ctx))
}

// The renewal that a lock handed over needs renews that lease
// only, not every lease its Client holds.
func TestMutexHandOverRenewsTheNewLeaseOnly(t *testing.T) {
	e := ownServer(t)
	ctx := withTimeout(t, time.Minute)
	const held = 20
	c := e.client(t)
	for i := range held {
		l, err := c.Mutex("many:" + strconv.Itoa(i)).Lock(ctx)
		require.NoError(t, err)
		defer l.Unlock(ctx)
	}
	holder := e.client(t)
	l := mustLock(t, ctx, holder.Mutex("handed").Lock)
	w := c.Mutex("handed", WithWaiterExpiry(time.Second)).Acquire(ctx)
	eventually(t, 5*time.Second, func() bool { return queuedMutexWaiters(t, ctx, holder, "handed") == 1 }, "waiter did not queue")
	time.Sleep(100 * time.Millisecond)
	before := commandCalls(t, e.server)["pexpire"]
	require.NoError(t, l.Unlock(ctx))
	wl := <-w
	require.NoError(t, wl.Err())
	eventually(t, 5*time.Second, func() bool {
		st, err := holder.Mutex("handed").Inspect(ctx)
		return err == nil && st.TTL > 2*time.Second
	}, "handed-over lease not renewed")
	renewed := commandCalls(t, e.server)["pexpire"] - before
	t.Logf("%d PEXPIREs from the release to the renewal, with %d other leases held", renewed, held)
	require.Less(t, renewed, int64(held/2))
	require.NoError(t, wl.Unlock(ctx))
}

// A waiter with a fixed lease is woken rather than handed the lock, and
// takes it with its own lease.
func TestMutexFixedLeaseWaiterTakesItsOwnLease(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		holder := e.client(t)
		l := mustLock(t, ctx, holder.Mutex(t.Name()).Lock)
		w := e.client(t).Mutex(t.Name(), WithFixedLease(20*time.Second), WithWaiterExpiry(time.Second)).Acquire(ctx)
		eventually(t, 5*time.Second, func() bool { return queuedMutexWaiters(t, ctx, holder, t.Name()) == 1 }, "waiter did not queue")
		require.NoError(t, l.Unlock(ctx))
		wl := <-w
		require.NoError(t, wl.Err())
		st, err := holder.Mutex(t.Name()).Inspect(ctx)
		require.NoError(t, err)
		require.Greater(t, st.TTL, 15*time.Second, "not the waiter's fixed lease")
		require.Zero(t, st.Waiters)
		require.NoError(t, wl.Unlock(ctx))
	})
}
