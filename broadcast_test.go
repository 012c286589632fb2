package redisync

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A broadcast ("*" or "1") reaches every local waiter it was meant for,
// and no other goroutine of the Client can take it: the tests below wait
// with many goroutines of one Client and check that each broadcast lets all
// of them go well before a fallback timer could have.

// fallbacks counts the calls of Metrics.WaitFallback.
func fallbacks(n *atomic.Int64) Option {
	return WithMetrics(Metrics{WaitFallback: func(string, string) { n.Add(1) }})
}

// TestRWMutexHammerOneClient is sync's HammerRWMutex on one Client, through
// RLocker and Locker: readers and writers looping with no work inside. No
// acquisition waits for a wake-up another goroutine of the Client took,
// which would leave the lock free for the waiters' refresh interval (1s).
func TestRWMutexHammerOneClient(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const readers, writers, rounds = 10, 2, 2000
		run := 4 * time.Second
		ctx := withTimeout(t, time.Minute)
		c := e.client(t)
		m := c.RWMutex(t.Name())
		// Warm up: the Client's connections and its subscription to the
		// lock's channel are made before the hammer measures.
		w := mustLock(t, ctx, m.Lock)
		r := m.RAcquire(ctx)
		eventually(t, 10*time.Second, func() bool {
			return subscribed(c, m.keys.channel, -1)
		}, "the reader did not subscribe")
		require.NoError(t, w.Unlock(ctx))
		require.NoError(t, recv(t, r, 10*time.Second, "the reader after the writer").Unlock(ctx))

		rl, wl := m.RLocker(), m.Locker()
		var activity atomic.Int32
		var mu sync.Mutex
		var at []time.Time
		acquired := func() {
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
		}
		stop := time.Now().Add(run)
		var wg sync.WaitGroup
		for i := range readers + writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					if time.Now().After(stop) {
						return
					}
					if i < readers {
						rl.Lock()
						acquired()
						if n := activity.Add(1); n < 1 || n >= 10000 {
							t.Errorf("a reader in with activity %d", n)
						}
						activity.Add(-1)
						rl.Unlock()
					} else {
						wl.Lock()
						acquired()
						if n := activity.Add(10000); n != 10000 {
							t.Errorf("a writer in with activity %d", n)
						}
						activity.Add(-10000)
						wl.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		require.NoError(t, rl.Err())
		require.NoError(t, wl.Err())
		slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
		var gap time.Duration
		for i := 1; i < len(at); i++ {
			gap = max(gap, at[i].Sub(at[i-1]))
		}
		t.Logf("%d acquisitions, longest gap between two: %v", len(at), gap)
		require.Greater(t, len(at), readers+writers)
		// A wake-up taken by the wrong goroutine leaves a gap of about the
		// refresh interval; a loaded machine, pauses of 100-400ms.
		require.Less(t, gap, 750*time.Millisecond, "the lock was left free while its waiters slept")
		requireRWFree(t, m)
	})
}

// TestLatchWakeUpOwedToAWaiterInFlight opens and closes a latch again while
// a waiter's read of it (closed) is still on its way back, then has other
// Waits of the same Client start: the waiter in flight still learns that
// the latch opened, at once rather than after latchRecheck, and the Waits
// that began after the opening keep waiting, until the next round opens
// the latch for them.
func TestLatchWakeUpOwedToAWaiterInFlight(t *testing.T) {
	const rounds, later = 4, 3
	e := ownServer(t)
	ctx := withTimeout(t, time.Minute)
	var fell atomic.Int64
	c, proxy := e.proxied(t, fallbacks(&fell))
	setter := e.client(t).Latch(t.Name())
	_, err := setter.Reset(ctx, 1)
	require.NoError(t, err)
	l := c.Latch(t.Name())

	waitFor := func() (done chan error) {
		done = make(chan error, 1)
		go func() { done <- l.Wait(ctx) }()
		return done
	}
	returned := func(w chan error, d time.Duration, msg string, args ...any) {
		t.Helper()
		select {
		case err := <-w:
			require.NoError(t, err)
		case <-time.After(d):
			t.Fatalf(msg, args...)
		}
	}
	// A first waiter makes the subscription, so that the next ones join it
	// at once.
	waiting := []chan error{waitFor()}
	e.awaitChannels(t, 1, 10*time.Second, "the first waiter did not subscribe")
	time.Sleep(100 * time.Millisecond) // its look after subscribing
	for round := range rounds {
		// The waiter in flight: its two reads (before and after joining)
		// each take half a second through the proxy. Once the second has run,
		// the latch opens and closes while its reply is on its way.
		before := scriptCalls(t, e)
		proxy.SetLatency(250 * time.Millisecond)
		inFlight := waitFor()
		eventually(t, 10*time.Second, func() bool { return scriptCalls(t, e) >= before+2 },
			"round %d: the waiter in flight did not read the latch twice", round)
		proxy.SetLatency(0)
		_, err = setter.CountDown(ctx)
		require.NoError(t, err)
		_, err = setter.Reset(ctx, 1)
		require.NoError(t, err)
		// Waits that start after the opening: each reads the latch closed,
		// joins the subscription and waits, while the reply of the one in
		// flight may still be held by the proxy.
		var next []chan error
		for range later {
			next = append(next, waitFor())
		}
		// The scripts so far: the two reads in flight, the opening and the
		// closing, a look of each earlier waiter after the opening, and
		// two reads of each later Wait.
		eventually(t, 5*time.Second, func() bool { return scriptCalls(t, e) >= before+4+int64(len(waiting)+2*later) },
			"round %d: the later Waits did not read the latch twice", round)
		for _, w := range append(waiting, inFlight) {
			returned(w, 5*time.Second, "round %d: a waiter missed the opening (recheck after %v)", round, latchRecheck)
		}
		time.Sleep(100 * time.Millisecond)
		for _, w := range next {
			select {
			case err := <-w:
				t.Fatalf("round %d: a Wait that began after the opening returned: %v", round, err)
			default:
			}
		}
		waiting = next
	}
	_, err = setter.CountDown(ctx)
	require.NoError(t, err)
	for _, w := range waiting {
		returned(w, 5*time.Second, "a Wait missed the last opening")
	}
	require.Zero(t, fell.Load(), "waits ended by their fallback timer")
}

// TestLatchOpeningsReachEveryLocalWaiter has goroutines of one Client wait
// on a latch in a loop while it opens and closes again: every opening lets
// every Wait that began before it return.
func TestLatchOpeningsReachEveryLocalWaiter(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const waiters, cycles = 8, 100
		ctx := withTimeout(t, 2*time.Minute)
		var fell atomic.Int64
		setter := e.client(t).Latch(t.Name())
		_, err := setter.Reset(ctx, 1)
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = setter.Reset(context.Background(), 0) })
		c, rf := e.faultyClient(t, fallbacks(&fell))
		l := c.Latch(t.Name())
		// began[i] is when waiter i began its current Wait, read[i] when a
		// read of the latch by waiter i last came back (UnixNano).
		began := make([]atomic.Int64, waiters)
		read := make([]atomic.Int64, waiters)
		type waiterKey struct{}
		rf.watch(runs(latchGetScript), func(ctx context.Context) {
			if i, ok := ctx.Value(waiterKey{}).(int); ok {
				read[i].Store(time.Now().UnixNano())
			}
		})
		wctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i := range waiters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.WithValue(wctx, waiterKey{}, i)
				for wctx.Err() == nil {
					began[i].Store(time.Now().UnixNano())
					if err := l.Wait(ctx); err != nil && wctx.Err() == nil {
						t.Errorf("Wait: %v", err)
					}
				}
			}()
		}
		for cycle := range cycles {
			// Every Wait has read the latch closed: a read of its own came
			// back since it began (a Wait whose first read comes after the
			// latch opened and closed again cannot know of that opening;
			// TestLatchWakeUpOwedToAWaiterInFlight covers a read on its way
			// back). A few cycles let the waiters settle a little longer.
			eventually(t, 5*time.Second, func() bool {
				for i := range began {
					if read[i].Load() <= began[i].Load() {
						return false
					}
				}
				return true
			}, "cycle %d: the waiters did not settle", cycle)
			time.Sleep(time.Duration(cycle%4) * time.Millisecond)
			opened := time.Now()
			_, err := setter.CountDown(ctx)
			require.NoError(t, err)
			_, err = setter.Reset(ctx, 1)
			require.NoError(t, err)
			eventually(t, 5*time.Second, func() bool {
				for i := range began {
					if began[i].Load() < opened.UnixNano() {
						return false
					}
				}
				return true
			}, "cycle %d: a Wait that began before the opening missed it (recheck after %v)", cycle, latchRecheck)
		}
		stop()
		wg.Wait()
		_, err = setter.Reset(ctx, 0)
		require.NoError(t, err)
		require.Zero(t, fell.Load(), "waits ended by their fallback timer")
	})
}

// TestGroupsOfOneClientAllWokenByARelease has several Groups of one Client
// wait for one lock, which a holder with a long fixed lease releases: the
// release's one message lets all of them take it in turn, each releasing
// at once, rather than the first alone while the others wait out the
// holder's lease.
func TestGroupsOfOneClientAllWokenByARelease(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const groups = 3
		ctx := withTimeout(t, time.Minute)
		var fell atomic.Int64
		names := taggedNames(t.Name(), "x", "a", "b", "c")
		holder := mustLock(t, ctx, e.client(t).Mutex(names[0], WithFixedLease(30*time.Second)).Lock)
		c := e.client(t, fallbacks(&fell))
		got := make([]<-chan *Lease, groups)
		for i := range got {
			g := NewGroup(c.Mutex(names[0]), c.Mutex(names[1+i]))
			require.True(t, g.atomic)
			got[i] = g.Acquire(ctx)
		}
		channel := c.Mutex(names[0]).keys.channel
		eventually(t, 10*time.Second, func() bool {
			return subscribed(c, channel, groups)
		}, "the groups did not subscribe")
		time.Sleep(200 * time.Millisecond) // their looks after subscribing
		released := time.Now()
		require.NoError(t, holder.Unlock(ctx))
		unlockEach(t, ctx, got, 10*time.Second, "a group after the release")
		took := time.Since(released)
		t.Logf("%d groups took the lock in turn %v after its release", groups, took.Round(time.Millisecond))
		require.Less(t, took, 5*time.Second, "a group waited out the holder's lease")
		require.Zero(t, fell.Load(), "waits ended by their fallback timer")
	})
}

// TestQuorumAndGroupsOfOneClientWokenByOneRelease has a Quorum wait beside
// Groups of the same Clients for the same Mutex lock on each server: the
// releases wake the Quorum too, though the Groups take the locks first.
func TestQuorumAndGroupsOfOneClientWokenByOneRelease(t *testing.T) {
	const servers = 3
	ctx := withTimeout(t, time.Minute)
	var fell atomic.Int64
	var holders, clients []*Client
	for range servers {
		e := ownServer(t)
		holders = append(holders, e.client(t))
		clients = append(clients, e.client(t, fallbacks(&fell)))
	}
	name := t.Name()
	holder := mustLock(t, ctx, NewQuorum(name, holders, WithFixedLease(30*time.Second)).Lock)
	var groups []<-chan *Lease
	for _, c := range clients {
		groups = append(groups, NewGroup(c.Mutex(name)).Acquire(ctx))
	}
	allSubscribed := func(n int) func() bool {
		return func() bool {
			for _, c := range clients {
				if !subscribed(c, c.Mutex(name).keys.channel, n) {
					return false
				}
			}
			return true
		}
	}
	eventually(t, 10*time.Second, allSubscribed(1), "the groups did not subscribe")
	time.Sleep(200 * time.Millisecond)
	q := NewQuorum(name, clients).Acquire(ctx)
	eventually(t, 10*time.Second, allSubscribed(2), "the quorum did not subscribe")
	time.Sleep(200 * time.Millisecond)
	released := time.Now()
	require.NoError(t, holder.Unlock(ctx))
	unlockEach(t, ctx, append(groups, q), 10*time.Second, "a group or the quorum after the release")
	took := time.Since(released)
	t.Logf("the groups and the quorum took the lock %v after its release", took.Round(time.Millisecond))
	require.Less(t, took, 5*time.Second, "a waiter waited out the holder's lease")
	require.Zero(t, fell.Load(), "waits ended by their fallback timer")
}

// unlockEach receives a Lease from each of chs, within d of the call, and
// releases it as soon as it comes: the acquisitions may take the lock in
// any order.
func unlockEach(t *testing.T, ctx context.Context, chs []<-chan *Lease, d time.Duration, what string) {
	t.Helper()
	deadline := time.After(d)
	done := make(chan error, len(chs))
	for _, ch := range chs {
		go func() {
			select {
			case l := <-ch:
				if err := l.Err(); err != nil {
					done <- err
					return
				}
				done <- l.Unlock(ctx)
			case <-ctx.Done():
				done <- ctx.Err()
			}
		}()
	}
	for range chs {
		select {
		case err := <-done:
			require.NoError(t, err, what)
		case <-deadline:
			t.Fatalf("%s: not all within %v", what, d)
		}
	}
}

// TestGroupWaitEndedByItsTimerReportsFallback frees a lock that a Group
// waits for without announcing it: the Group gets the lock when its timer
// (the holder's lease) ends, and reports the lost wake-up.
func TestGroupWaitEndedByItsTimerReportsFallback(t *testing.T) {
	e := standaloneEnv(t)
	ctx := withTimeout(t, time.Minute)
	var fell atomic.Int64
	names := taggedNames(t.Name(), "x", "y")
	holder := mustLock(t, ctx, e.client(t).Mutex(names[0], WithFixedLease(time.Second)).Lock)
	c := e.client(t, fallbacks(&fell))
	// The Client's presence pass, which would find the lock free and wake
	// the Group, is held back: only the timer ends the Group's wait.
	c.presence.stall.Lock()
	defer c.presence.stall.Unlock()
	got := NewGroup(c.Mutex(names[0]), c.Mutex(names[1])).Acquire(ctx)
	time.Sleep(200 * time.Millisecond)
	require.True(t, pending(got))
	// Freed as a release frees it (kept for the fence retention), without
	// its message.
	rc := e.rueidisClient(t)
	key := holder.h.keys.lock
	for _, err := range rc.DoMulti(ctx,
		rc.B().Hset().Key(key).FieldValue().FieldValue("owner", "").FieldValue("holds", "").Build(),
		rc.B().Pexpire().Key(key).Milliseconds(time.Minute.Milliseconds()).Build()) {
		require.NoError(t, err.Error())
	}
	l := recv(t, got, 10*time.Second, "the group after its timer")
	// The count comes messageGrace after the timer, when no message came.
	eventually(t, 5*time.Second, func() bool { return fell.Load() == 1 }, "the fallback was not reported")
	time.Sleep(2 * messageGrace)
	require.Equal(t, int64(1), fell.Load(), "fallbacks reported")
	require.NoError(t, l.Unlock(ctx))
}

// subscribed tells whether c's subscription to channel is in place on its
// current connection, as the server confirmed, with refs waiters (any
// number when refs < 0). A resubscription after a broken connection counts:
// the waiters look again at its confirmation.
func subscribed(c *Client, channel string, refs int) bool {
	c.notify.mu.Lock()
	defer c.notify.mu.Unlock()
	s := c.notify.subs[subKey{channel, ownPubSub}]
	return s != nil && s.sent && s.confirms.Load() >= 1 && (refs < 0 || s.refs == refs)
}
