package redisync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// semState inspects s, failing the test on error.
func semState(t testing.TB, s *Semaphore) SemaphoreState {
	t.Helper()
	st, err := s.Inspect(context.Background())
	require.NoError(t, err)
	return st
}

// semSized sets the size of s, which has none, and returns s.
func semSized(t testing.TB, s *Semaphore, size int) *Semaphore {
	t.Helper()
	_, err := s.TrySetSize(context.Background(), size)
	require.NoError(t, err)
	return s
}

// semOnClients returns n handles of the semaphore named after the test,
// each on a Client of its own, and sets its size.
func semOnClients(t testing.TB, e *env, n, size int) []*Semaphore {
	t.Helper()
	ss := onClients(t, e, n, func(c *Client) *Semaphore { return c.Semaphore(t.Name()) })
	semSized(t, ss[0], size)
	return ss
}

// semWaitQueued waits until s has n queued waiters.
func semWaitQueued(t testing.TB, s *Semaphore, n int) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool { return semState(t, s).Waiters == n },
		"waiters never queued: want %d, have %+v", n, semState(t, s))
}

// semNotYet checks that ch has delivered nothing.
func semNotYet(t testing.TB, ch <-chan *Lease, what string) {
	t.Helper()
	select {
	case l := <-ch:
		t.Fatalf("%s: delivered too early (err %v)", what, l.Err())
	default:
	}
}

// semNoKeysLeft checks that the semaphore's keys other than its size hash
// are gone, deletes it and checks that nothing is left.
func semNoKeysLeft(t *testing.T, e *env, s *Semaphore) {
	t.Helper()
	for _, k := range []string{s.keys.holders, s.keys.queue, s.keys.deadlines} {
		require.Empty(t, e.keys(t, k), "key left behind")
	}
	_, err := s.Delete(context.Background())
	require.NoError(t, err)
	require.Empty(t, e.keys(t, s.keys.sem))
}

func TestSemaphoreBasics(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		s := c.Semaphore(t.Name())
		require.Equal(t, t.Name(), s.Name())
		k := s.keys
		for _, key := range []string{k.holders, k.queue, k.deadlines, k.channel} {
			require.Equal(t, slotHash(k.sem), slotHash(key), "%s and %s in different slots", k.sem, key)
		}

		ok, err := s.TrySetSize(ctx, 5)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.TrySetSize(ctx, 7)
		require.NoError(t, err)
		require.False(t, ok, "TrySetSize changed an existing size")

		l3, err := s.Lock(ctx, 3)
		require.NoError(t, err)
		require.NoError(t, l3.Err())
		require.Equal(t, t.Name(), l3.Name())
		require.Zero(t, l3.Token())
		l2, err := s.TryLock(ctx, 2)
		require.NoError(t, err)
		st := semState(t, s)
		require.Equal(t, 5, st.Size)
		require.Equal(t, 5, st.Acquired)
		require.Equal(t, 0, st.Available)
		require.Len(t, st.Holders, 2)
		for _, h := range st.Holders {
			require.Equal(t, c.ID(), h.ClientID())
			require.Contains(t, []int{2, 3}, h.Permits)
			require.Greater(t, h.TTL, 20*time.Second)
		}

		_, err = e.client(t).Semaphore(t.Name()).TryLock(ctx, 1)
		require.ErrorIs(t, err, ErrNoPermits)

		require.NoError(t, l3.Unlock(ctx))
		require.ErrorIs(t, l3.Err(), ErrReleased)
		require.ErrorIs(t, context.Cause(l3.Context()), ErrReleased)
		require.ErrorIs(t, l3.Unlock(ctx), ErrNotHeld, "second release")
		st = semState(t, s)
		require.Equal(t, 2, st.Acquired)
		require.Equal(t, 3, st.Available)
		require.NoError(t, l2.Unlock(ctx))
		st = semState(t, s)
		require.Equal(t, SemaphoreState{Size: 5, Available: 5}, st)
		semNoKeysLeft(t, e, s)
	})
}

func TestSemaphoreSize(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		s := e.client(t).Semaphore(t.Name())

		// No size: acquisitions fail at once, whatever their form.
		_, err := s.Lock(ctx, 1)
		require.ErrorIs(t, err, ErrNoSize)
		require.ErrorIs(t, err, ErrInvalidArgument)
		_, err = s.TryLock(ctx, 1)
		require.ErrorIs(t, err, ErrNoSize)
		require.ErrorIs(t, delivered(t, s.Acquire(ctx, 1)).Err(), ErrNoSize)
		_, err = s.AddSize(ctx, 1)
		require.ErrorIs(t, err, ErrNoSize)
		require.Equal(t, SemaphoreState{}, semState(t, s))

		prev, err := s.SetSize(ctx, 2)
		require.NoError(t, err)
		require.Zero(t, prev)
		n, err := s.AddSize(ctx, 3)
		require.NoError(t, err)
		require.Equal(t, 5, n)
		n, err = s.AddSize(ctx, -5)
		require.ErrorIs(t, err, ErrInvalidArgument, "size 0")
		require.Equal(t, 5, n)
		n, err = s.AddSize(ctx, -4)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		prev, err = s.SetSize(ctx, 3)
		require.NoError(t, err)
		require.Equal(t, 1, prev)

		// More than the size: at once, not after a wait.
		short, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err = s.Lock(short, 4)
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.NoError(t, short.Err())

		// Shrinking below the permits held: nobody gets more until enough
		// come back.
		l, err := s.Lock(ctx, 3)
		require.NoError(t, err)
		_, err = s.SetSize(ctx, 2)
		require.NoError(t, err)
		st := semState(t, s)
		require.Equal(t, -1, st.Available)
		w := s.Acquire(ctx, 2)
		semWaitQueued(t, s, 1)
		// Growing wakes the waiter once its permits fit.
		_, err = s.SetSize(ctx, 5)
		require.NoError(t, err)
		wl := delivered(t, w)
		require.NoError(t, wl.Err())
		// Shrinking below what a waiter asks for makes it fail.
		w = s.Acquire(ctx, 4)
		semWaitQueued(t, s, 1)
		_, err = s.SetSize(ctx, 3)
		require.NoError(t, err)
		require.ErrorIs(t, delivered(t, w).Err(), ErrInvalidArgument)
		require.NoError(t, l.Unlock(ctx))
		require.NoError(t, wl.Unlock(ctx))
		require.Zero(t, semState(t, s).Waiters)
		e.requireNoSubscriptions(t)
		semNoKeysLeft(t, e, s)
	})
}

func TestSemaphoreBadInput(t *testing.T) {
	e := standaloneEnv(t)
	ctx := context.Background()
	c := e.client(t)
	s := c.Semaphore(t.Name())
	ok, err := s.TrySetSize(ctx, 2)
	require.NoError(t, err)
	require.True(t, ok)
	defer s.Delete(ctx)

	var nilCtx context.Context
	var nilSem *Semaphore
	invalid := map[string]*Semaphore{
		"empty name":        c.Semaphore(""),
		"nil client":        (*Client)(nil).Semaphore("x"),
		"short fixed lease": c.Semaphore("x", WithFixedLease(time.Microsecond)),
		"nil semaphore":     nilSem,
		"zero semaphore":    {},
	}
	for what, bad := range invalid {
		t.Run(what, func(t *testing.T) {
			notPanics(t, what, func() { requireSemaphoreFails(t, bad, ErrInvalidArgument) })
		})
	}
	require.NotNil(t, c.Semaphore("x", nil), "a nil option is ignored")

	for _, n := range []int{0, -1, maxPermits + 1} {
		_, err := s.Lock(ctx, n)
		require.ErrorIs(t, err, ErrInvalidArgument, "Lock(%d)", n)
		_, err = s.TryLock(ctx, n)
		require.ErrorIs(t, err, ErrInvalidArgument, "TryLock(%d)", n)
		requireFailedLease(t, delivered(t, s.Acquire(ctx, n)), ErrInvalidArgument)
	}
	_, err = s.Lock(ctx, 3)
	require.ErrorIs(t, err, ErrInvalidArgument, "more than the size")
	for _, size := range []int{0, -3, maxPermits + 1} {
		_, err := s.TrySetSize(ctx, size)
		require.ErrorIs(t, err, ErrInvalidArgument, "TrySetSize(%d)", size)
		_, err = s.SetSize(ctx, size)
		require.ErrorIs(t, err, ErrInvalidArgument, "SetSize(%d)", size)
	}
	_, err = s.AddSize(ctx, maxPermits)
	require.ErrorIs(t, err, ErrInvalidArgument, "beyond the largest size")
	//nolint:staticcheck // a nil context on purpose
	_, err = s.Lock(nilCtx, 1)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = s.Inspect(nilCtx)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Equal(t, "", nilSem.Name())

	// Released twice, and a lease from a failed acquisition.
	l, err := s.Lock(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
	_, err = s.TryLock(ctx, 5)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Equal(t, 0, semState(t, s).Acquired)

	// Keys that hold something else: reported, and left alone.
	rc := e.rueidisClient(t)
	eachForeignValue(t, rc, func(t *testing.T, kind string, plant func(key string)) {
		bad := c.Semaphore("semaphore-wrongtype-" + kind)
		plant(bad.keys.sem)
		requireAllIs(t, ErrWrongType,
			errOf(bad.Lock(ctx, 1)),
			errOf(bad.TryLock(ctx, 1)),
			errOf(bad.TrySetSize(ctx, 1)),
			errOf(bad.Inspect(ctx)),
			errOf(bad.Delete(ctx)))
		typ, err := rc.Do(ctx, rc.B().Type().Key(bad.keys.sem).Build()).ToString()
		require.NoError(t, err)
		require.Contains(t, []string{"string", "hash"}, typ)
		require.Empty(t, e.keys(t, bad.keys.queue), "nothing queued")
	})
}

func TestSemaphoreNeverOversubscribed(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const size, clients, perClient = 5, 3, 4
		rounds := soak(30, 300)
		ctx := withTimeout(t, 2*time.Minute)
		var inside, peak atomic.Int64
		var overs atomic.Int32
		var wg sync.WaitGroup
		for _, s := range semOnClients(t, e, clients, size) {
			for range perClient {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range rounds {
						n := 1 + rand.IntN(3)
						var l *Lease
						var err error
						switch rand.IntN(3) {
						case 0:
							l, err = s.Lock(ctx, n)
						case 1:
							l = <-s.Acquire(ctx, n)
							err = l.Err()
						default:
							if l, err = s.TryLock(ctx, n); errors.Is(err, ErrNoPermits) {
								continue
							}
						}
						if err != nil {
							t.Error(err)
							return
						}
						now := inside.Add(int64(n))
						if now > size {
							overs.Add(1)
						}
						for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
						}
						time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
						inside.Add(-int64(n))
						if err := l.Unlock(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		require.Zero(t, overs.Load(), "more than %d permits held at once (peak %d)", size, peak.Load())
		t.Logf("peak %d of %d permits held", peak.Load(), size)
		s := e.client(t).Semaphore(t.Name())
		require.Equal(t, SemaphoreState{Size: size, Available: size}, semState(t, s))
		e.requireNoSubscriptions(t)
		semNoKeysLeft(t, e, s)
	})
}

// A holder that dies gives its permits back when its lease ends, to a
// waiter and with nobody waiting, without another operation running.
func TestSemaphoreCrashedHolder(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		const lease = 600 * time.Millisecond
		// The holder's connection goes away: it can neither renew nor
		// release.
		crash := func(name string, n int) time.Time {
			rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: e.addrs, DisableCache: true})
			require.NoError(t, err)
			c, err := New(rc, WithWatchdogLease(lease), WithLogger(quietLogger()))
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			sent := time.Now()
			l, err := c.Semaphore(name).Lock(ctx, n)
			require.NoError(t, err)
			rc.Close()
			select {
			case <-l.Lost():
			case <-time.After(10 * time.Second):
				t.Fatal("the crashed holder never noticed")
			}
			return sent
		}

		// A waiter for every permit.
		s := e.client(t).Semaphore(t.Name())
		semSized(t, s, 3)
		sent := crash(t.Name(), 2)
		l, err := s.Lock(ctx, 3)
		require.NoError(t, err)
		got := time.Since(sent)
		// The server's clock counts whole milliseconds.
		require.GreaterOrEqual(t, got, lease-5*time.Millisecond, "permits handed out before the holder's lease ended")
		require.Less(t, got, 10*time.Second)
		require.NoError(t, l.Unlock(ctx))

		// Nobody waiting: the keys expire on their own.
		quiet := e.client(t).Semaphore(t.Name() + ":quiet")
		_, err = quiet.TrySetSize(ctx, 1)
		require.NoError(t, err)
		crash(quiet.name, 1)
		eventually(t, 10*time.Second, func() bool { return len(e.keys(t, quiet.keys.holders)) == 0 },
			"the holders key outlived the lease")
		require.Equal(t, SemaphoreState{Size: 1, Available: 1}, semState(t, quiet))
		semNoKeysLeft(t, e, s)
		semNoKeysLeft(t, e, quiet)
	})
}

// A waiter for several permits is woken when the last of them is released,
// one at a time, by several holders (Redisson #6664): by the release's
// message, not at its next periodic look.
func TestSemaphoreWakesWaiterForSeveralPermits(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		const size = 3
		holders := e.client(t).Semaphore(t.Name())
		semSized(t, holders, size)
		waiters := e.client(t).Semaphore(t.Name())
		for round := range 5 {
			var held []*Lease
			for range size {
				l, err := holders.Lock(ctx, 1)
				require.NoError(t, err)
				held = append(held, l)
			}
			big := waiters.Acquire(ctx, size)
			semWaitQueued(t, holders, 1)
			two := waiters.Acquire(ctx, 2)
			semWaitQueued(t, holders, 2)
			for _, l := range held[:size-1] {
				require.NoError(t, l.Unlock(ctx))
				time.Sleep(20 * time.Millisecond)
				semNotYet(t, big, "3 permits")
				semNotYet(t, two, "2 permits queued behind 3")
			}
			start := time.Now()
			require.NoError(t, held[size-1].Unlock(ctx))
			bl := delivered(t, big)
			woken := time.Since(start)
			require.NoError(t, bl.Err())
			// Queued places are renewed every second: a waiter that missed
			// the release would take up to that long.
			require.Less(t, woken, 500*time.Millisecond, "round %d: woken late", round)
			semNotYet(t, two, "2 permits while 3 are held")
			require.NoError(t, bl.Unlock(ctx))
			tl := delivered(t, two)
			require.NoError(t, tl.Err())
			require.NoError(t, tl.Unlock(ctx))
		}
		require.Equal(t, SemaphoreState{Size: size, Available: size}, semState(t, holders))
		semNoKeysLeft(t, e, holders)
	})
}

// A large acquisition among a stream of small ones gets its permits: once
// it is queued, no small acquisition that came after it passes it.
func TestSemaphoreLargeAcquirerNotStarved(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const size, smallers = 4, 8
		ctx := withTimeout(t, time.Minute)
		var grants sync.Mutex
		var smallAt []time.Time
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, s := range semOnClients(t, e, smallers, size) {
			repeatUntil(t, &wg, stop, func() error {
				l, err := s.Lock(ctx, 1)
				if err != nil {
					return err
				}
				grants.Lock()
				smallAt = append(smallAt, time.Now())
				grants.Unlock()
				time.Sleep(time.Duration(2+rand.IntN(8)) * time.Millisecond)
				return l.Unlock(ctx)
			})
		}
		// The stream keeps every permit busy most of the time.
		time.Sleep(300 * time.Millisecond)
		big := e.client(t).Semaphore(t.Name())
		start := time.Now()
		l, err := big.Lock(ctx, size)
		got := time.Now()
		require.NoError(t, err)
		// Alone with all the permits.
		st := semState(t, big)
		require.Equal(t, size, st.Acquired)
		require.Len(t, st.Holders, 1)
		require.NoError(t, l.Unlock(ctx))
		close(stop)
		wg.Wait()
		grants.Lock()
		passed := 0
		for _, at := range smallAt {
			if at.After(start) && at.Before(got) {
				passed++
			}
		}
		total := len(smallAt)
		grants.Unlock()
		t.Logf("%v for all %d permits; %d small grants meanwhile, %d in all", got.Sub(start), size, passed, total)
		require.Less(t, got.Sub(start), 10*time.Second)
		// Each small acquirer was granted at most once after the large one
		// was queued: in flight then, or queued before it. (Without FIFO
		// they would pass it hundreds of times a second.)
		require.LessOrEqual(t, passed, 2*smallers, "small acquisitions passed the large one")
		require.Greater(t, total, 2*smallers, "the stream of small acquisitions ran")
		e.requireNoSubscriptions(t)
		semNoKeysLeft(t, e, big)
	})
}

// Waiters that give up leave the queue at once (not when their place
// expires), and the waiters behind them move up.
func TestSemaphoreCancelledWaitersLeaveQueue(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		s := e.client(t).Semaphore(t.Name())
		semSized(t, s, 3)
		held, err := s.Lock(ctx, 2)
		require.NoError(t, err)

		// A large waiter at the head keeps the free permit for itself.
		bigCtx, bigCancel := context.WithCancel(ctx)
		big := e.client(t).Semaphore(t.Name()).Acquire(bigCtx, 3)
		semWaitQueued(t, s, 1)
		small := e.client(t).Semaphore(t.Name()).Acquire(ctx, 1)
		semWaitQueued(t, s, 2)
		time.Sleep(50 * time.Millisecond)
		semNotYet(t, small, "a small waiter behind a large one")
		start := time.Now()
		bigCancel()
		require.ErrorIs(t, delivered(t, big).Err(), context.Canceled)
		sl := delivered(t, small)
		require.NoError(t, sl.Err())
		require.Less(t, time.Since(start), time.Second, "the small waiter waited for the large one's place to expire")

		// Many waiters giving up, in every form.
		c := e.client(t)
		var wg sync.WaitGroup
		for i := range 30 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wctx, wcancel := context.WithTimeout(ctx, time.Duration(20+rand.IntN(200))*time.Millisecond)
				defer wcancel()
				ws := c.Semaphore(t.Name())
				if i%2 == 0 {
					_, err := ws.Lock(wctx, 1+i%3)
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("Lock: %v", err)
					}
					return
				}
				if err := (<-ws.Acquire(wctx, 1+i%3)).Err(); !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Acquire: %v", err)
				}
			}()
		}
		wg.Wait()
		st := semState(t, s)
		require.Zero(t, st.Waiters, "queue places left: %+v", st)
		require.Equal(t, 3, st.Acquired)
		require.NoError(t, held.Unlock(ctx))
		require.NoError(t, sl.Unlock(ctx))

		// Permits granted to an Acquire nobody received come back when its
		// context ends.
		actx, acancel := context.WithCancel(ctx)
		unreceived := s.Acquire(actx, 3)
		eventually(t, 10*time.Second, func() bool { return semState(t, s).Acquired == 3 }, "Acquire never acquired")
		acancel()
		eventually(t, 10*time.Second, func() bool { return semState(t, s).Acquired == 0 }, "unreceived permits not given back")
		ul := delivered(t, unreceived)
		// The lease reports it once the release returned.
		eventually(t, 10*time.Second, func() bool { return errors.Is(ul.Err(), context.Canceled) }, "unreceived lease: %v", ul.Err())
		e.requireNoSubscriptions(t)
		semNoKeysLeft(t, e, s)
	})
}

// Names that look troublesome work like any other, with every key and the
// channel of one name in one slot.
func TestSemaphoreAndLatchOddNames(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, WithPrefix("semodd"))
		for _, name := range badInputNames() {
			s := c.Semaphore(name)
			k := s.keys
			for _, key := range []string{k.holders, k.queue, k.deadlines, k.channel} {
				require.Equal(t, slotHash(k.sem), slotHash(key))
			}
			semSized(t, s, 2)
			l, err := s.Lock(ctx, 2)
			require.NoError(t, err)
			require.Equal(t, name, l.Name())
			_, err = c.Semaphore(name).TryLock(ctx, 1)
			require.ErrorIs(t, err, ErrNoPermits)
			require.NoError(t, l.Unlock(ctx))
			require.Equal(t, SemaphoreState{Size: 2, Available: 2}, semState(t, s))
			ok, err := s.Delete(ctx)
			require.NoError(t, err)
			require.True(t, ok)

			lt := c.Latch(name)
			require.Equal(t, slotHash(lt.key), slotHash(lt.channel))
			_, err = lt.TrySetCount(ctx, 1)
			require.NoError(t, err)
			n, err := lt.CountDown(ctx)
			require.NoError(t, err)
			require.Zero(t, n)
			require.NoError(t, lt.Wait(ctx))
		}
		require.Empty(t, e.keys(t, "semodd:*"))
	})
}

// A waiter whose process died is passed over once its place expires.
func TestSemaphoreDeadWaiterPassedOver(t *testing.T) {
	e := standaloneEnv(t)
	ctx := withTimeout(t, time.Minute)
	s := e.client(t).Semaphore(t.Name())
	semSized(t, s, 2)
	held, err := s.Lock(ctx, 1)
	require.NoError(t, err)
	// A queue place nobody renews: a waiter for both permits that died.
	dead := "dead:1:2"
	rc := e.rueidisClient(t)
	require.NoError(t, rc.Do(ctx, rc.B().Zadd().Key(s.keys.queue).ScoreMember().ScoreMember(0, dead).Build()).Error())
	now, err := rc.Do(ctx, rc.B().Time().Build()).AsIntSlice()
	require.NoError(t, err)
	expiry := float64(now[0]*1000 + now[1]/1000 + semWaiterExpiry.Milliseconds())
	require.NoError(t, rc.Do(ctx, rc.B().Zadd().Key(s.keys.deadlines).ScoreMember().ScoreMember(expiry, dead).Build()).Error())
	start := time.Now()
	l, err := e.client(t).Semaphore(t.Name()).Lock(ctx, 1)
	require.NoError(t, err)
	waited := time.Since(start)
	t.Logf("passed a dead waiter after %v", waited)
	require.Greater(t, waited, semWaiterExpiry/2, "a live-looking waiter was passed over")
	require.Less(t, waited, 3*semWaiterExpiry)
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, held.Unlock(ctx))
	require.Zero(t, semState(t, s).Waiters)
	_, err = s.Delete(ctx)
	require.NoError(t, err)
}

func TestSemaphoreReplicaAck(t *testing.T) {
	_, c, replica := ackedClient(t)
	ctx := context.Background()
	s := c.Semaphore("acked")
	semSized(t, s, 2)
	l, err := s.Lock(ctx, 2)
	require.NoError(t, err)
	requireReply(t, replica, "1", "the replica has the holder when Lock returns", "ZCARD", s.keys.holders)
	require.NoError(t, l.Unlock(ctx))

	// A replica that does not answer: the acquisition is undone.
	require.NoError(t, replica.Pause())
	defer replica.Resume()
	_, err = s.TryLock(ctx, 1)
	require.ErrorIs(t, err, ErrNotReplicated)
	require.Equal(t, SemaphoreState{Size: 2, Available: 2}, semState(t, s), "nothing held after a failed acknowledgement")
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = s.Lock(short, 1)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, ErrNotReplicated, "Lock retried until its context ended")
	require.Equal(t, SemaphoreState{Size: 2, Available: 2}, semState(t, s))
	require.NoError(t, replica.Resume())
	l, err = s.Lock(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
}

func TestSemaphoreFixedLeaseExpires(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		s := e.client(t).Semaphore(t.Name(), WithFixedLease(400*time.Millisecond))
		semSized(t, s, 1)
		l, err := s.Lock(ctx, 1)
		require.NoError(t, err)
		st := semState(t, s)
		require.Len(t, st.Holders, 1)
		require.LessOrEqual(t, st.Holders[0].TTL, 400*time.Millisecond)
		requireLost(t, l, 5*time.Second, ErrExpired)
		other := e.client(t).Semaphore(t.Name())
		eventually(t, 5*time.Second, func() bool {
			l2, err := other.TryLock(ctx, 1)
			if err != nil {
				return false
			}
			require.NoError(t, l2.Unlock(ctx))
			return true
		}, "permit not back after its lease")
		require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
		semNoKeysLeft(t, e, s)
	})
}

func TestSemaphoreWatchdogKeepsPermits(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, WithWatchdogLease(300*time.Millisecond))
		s := c.Semaphore(t.Name())
		semSized(t, s, 2)
		l, err := s.Lock(ctx, 2)
		require.NoError(t, err)
		select {
		case <-l.Lost():
			t.Fatalf("lost: %v", l.Err())
		case <-time.After(1500 * time.Millisecond): // five leases
		}
		st := semState(t, s)
		require.Equal(t, 2, st.Acquired)
		require.Greater(t, st.Holders[0].TTL, time.Duration(0))
		require.NoError(t, l.Unlock(ctx))
		c.watchdog.mu.Lock()
		n := len(c.watchdog.holders)
		c.watchdog.mu.Unlock()
		require.Zero(t, n, "a released lease is never renewed again")
		semNoKeysLeft(t, e, s)
	})
}

func TestSemaphoreDeleteAndClose(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		s := e.client(t, WithWatchdogLease(600*time.Millisecond)).Semaphore(t.Name())
		semSized(t, s, 2)
		l, err := s.Lock(ctx, 2)
		require.NoError(t, err)
		w := e.client(t).Semaphore(t.Name()).Acquire(ctx, 1)
		semWaitQueued(t, s, 1)
		ok, err := s.Delete(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		require.ErrorIs(t, delivered(t, w).Err(), ErrNoSize, "a waiter of a deleted semaphore")
		requireLost(t, l, 5*time.Second, ErrExpired)
		ok, err = s.Delete(ctx)
		require.NoError(t, err)
		require.False(t, ok)

		// Close gives the permits back at once.
		_, err = s.TrySetSize(ctx, 2)
		require.NoError(t, err)
		closing := e.client(t)
		cl, err := closing.Semaphore(t.Name()).Lock(ctx, 2)
		require.NoError(t, err)
		require.NoError(t, closing.Close())
		require.ErrorIs(t, cl.Err(), ErrClosed)
		require.Equal(t, SemaphoreState{Size: 2, Available: 2}, semState(t, s))
		_, err = closing.Semaphore(t.Name()).Lock(ctx, 1)
		require.ErrorIs(t, err, ErrClosed)
		e.requireNoSubscriptions(t)
		semNoKeysLeft(t, e, s)
	})
}

func TestSemaphoreCancellationsLeaveNothing(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		noLeak := leakCheck(t)
		const prefix = "semcancel"
		const size = 3
		names := []string{"a", "b", "{c}"}
		clients := e.clients(t, 3, WithPrefix(prefix))
		ctx := context.Background()
		inside := make(map[string]*atomic.Int64)
		for _, name := range names {
			_, err := clients[0].Semaphore(name).TrySetSize(ctx, size)
			require.NoError(t, err)
			inside[name] = new(atomic.Int64)
		}
		total := soak(6000, 60000)
		var opened, overs atomic.Int64
		// Deadlines that end at every step of an acquisition, up to a few
		// round trips.
		acquired := churn(t, total, 24, below(5*time.Millisecond), func(ctx context.Context, w int) (*Lease, error) {
			c, name := clients[w%len(clients)], names[rand.IntN(len(names))]
			if w%4 == 3 {
				// Latches: wait with a deadline, count down, set again.
				if latchChurn(t, ctx, c.Latch(name)) {
					opened.Add(1)
				}
				return nil, errNoLease
			}
			s := c.Semaphore(name)
			n := 1 + rand.IntN(size)
			l, err := oneOf(
				func(ctx context.Context) (*Lease, error) { return s.Lock(ctx, n) },
				waited(func(ctx context.Context) <-chan *Lease { return s.Acquire(ctx, n) }),
				func(ctx context.Context) (*Lease, error) { return s.TryLock(ctx, n) },
			)(ctx)
			if err != nil {
				return nil, err
			}
			if inside[name].Add(int64(n)) > size {
				overs.Add(1)
			}
			time.Sleep(rand.N(200 * time.Microsecond))
			inside[name].Add(-int64(n))
			return l, nil
		})
		t.Logf("%d attempts, %d acquisitions, %d latch waits saw it open", total, acquired, opened.Load())
		require.NotZero(t, acquired)
		require.Zero(t, overs.Load(), "permits oversubscribed")
		for _, c := range clients {
			require.NoError(t, c.Close())
		}
		// Every abandoned acquisition gave its permits and its queue place
		// back; what is left is the sizes and the closed latches.
		check := e.client(t, WithPrefix(prefix))
		for _, name := range names {
			st := semState(t, check.Semaphore(name))
			require.Equal(t, SemaphoreState{Size: size, Available: size}, st, "semaphore %q", name)
			_, err := check.Semaphore(name).Delete(ctx)
			require.NoError(t, err)
			_, err = check.Latch(name).Reset(ctx, 0)
			require.NoError(t, err)
		}
		require.NoError(t, check.Close())
		require.Empty(t, e.keys(t, prefix+":*"), "keys left")
		e.requireNoSubscriptions(t)
		noLeak(nil)
	})
}

// latchChurn makes one latch operation at random: a wait until ctx ends
// (it reports whether the latch was seen open), or a count-down and a new
// count.
func latchChurn(t *testing.T, ctx context.Context, lt *Latch) (open bool) {
	switch rand.IntN(3) {
	case 0:
		return lt.Wait(ctx) == nil
	case 1:
		select {
		case <-lt.Done(ctx):
			return false
		case <-ctx.Done():
			return false
		}
	}
	// A connection dialed for a command whose context ended fails the
	// others waiting for it too: such errors are retried by callers.
	if _, err := lt.CountDown(context.Background()); err != nil && !transient(err) {
		t.Error(err)
	}
	if _, err := lt.TrySetCount(context.Background(), 1+rand.IntN(3)); err != nil && !transient(err) {
		t.Error(err)
	}
	return false
}

// semRetry runs f until it succeeds, for up to 10s: after a restart, the
// first command sent on a broken connection fails.
func semRetry(t *testing.T, f func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err = f(); err == nil {
			return
		}
		if _, ok := rueidis.IsRedisErr(err); ok || errors.Is(err, ErrInvalidArgument) {
			break
		}
	}
	t.Fatal(err)
}

func TestSemaphoreRedisRestart(t *testing.T) {
	for _, persistent := range []bool{false, true} {
		t.Run(fmt.Sprintf("persistent=%v", persistent), func(t *testing.T) {
			// A persistent server appends every write to a file synced at
			// once, so that a killed server comes back with its data.
			var args []string
			if persistent {
				args = []string{"--appendonly", "yes", "--appendfsync", "always"}
			}
			e, holder, waiter, done := restartPair(t, 3*time.Second, args...)
			ctx := withTimeout(t, time.Minute)
			s := holder.Semaphore("restart")
			semSized(t, s, 3)
			held, err := s.Lock(ctx, 3)
			require.NoError(t, err)
			var waiting []<-chan *Lease
			for _, n := range []int{2, 1, 3} {
				waiting = append(waiting, waiter.Semaphore("restart").Acquire(ctx, n))
				semWaitQueued(t, s, len(waiting))
			}
			lt := holder.Latch("restart")
			_, err = lt.TrySetCount(ctx, 1)
			require.NoError(t, err)
			latchWait := make(chan error, 1)
			go func() { latchWait <- waiter.Latch("restart").Wait(ctx) }()
			e.awaitChannels(t, 2, 5*time.Second, "waiters did not subscribe")

			require.NoError(t, e.server.Restart())
			if !persistent {
				// Everything is gone: the holder's lease, the size (waiters
				// fail: the semaphore must be set up again) and the latch's
				// count (it is open).
				requireLost(t, held, 10*time.Second, ErrExpired, ErrConnectionLost)
				for _, w := range waiting {
					require.ErrorIs(t, delivered(t, w).Err(), ErrNoSize)
				}
				require.NoError(t, <-latchWait)
				semRetry(t, func() error { _, err := s.TrySetSize(ctx, 3); return err })
				l, err := waiter.Semaphore("restart").Lock(ctx, 3)
				require.NoError(t, err)
				require.NoError(t, l.Unlock(ctx))
			} else {
				// Nothing is lost: the holder keeps its permits, the waiters
				// their places, in order, and the latch stays closed.
				time.Sleep(500 * time.Millisecond)
				require.NoError(t, held.Err())
				for _, w := range waiting {
					semNotYet(t, w, "waiter while the permits are held")
				}
				var st SemaphoreState
				semRetry(t, func() (err error) { st, err = s.Inspect(ctx); return err })
				require.Equal(t, 3, st.Acquired)
				require.Equal(t, 3, st.Waiters)
				select {
				case err := <-latchWait:
					t.Fatalf("latch wait returned while closed: %v", err)
				default:
				}
				// The first command on a connection the restart broke may
				// fail; Unlock is safe to retry.
				semRetry(t, func() error { return held.Unlock(ctx) })
				first := delivered(t, waiting[0])
				second := delivered(t, waiting[1])
				require.NoError(t, first.Err())
				require.NoError(t, second.Err())
				semNotYet(t, waiting[2], "3 permits while 3 are held")
				require.NoError(t, first.Unlock(ctx))
				require.NoError(t, second.Unlock(ctx))
				third := delivered(t, waiting[2])
				require.NoError(t, third.Err())
				require.NoError(t, third.Unlock(ctx))
				semRetry(t, func() error { _, err := lt.CountDown(ctx); return err })
				select {
				case err := <-latchWait:
					require.NoError(t, err)
				case <-time.After(10 * time.Second):
					t.Fatal("latch wait did not return")
				}
			}
			require.Equal(t, SemaphoreState{Size: 3, Available: 3}, semState(t, s))
			_, err = s.Delete(ctx)
			require.NoError(t, err)
			require.Empty(t, e.keys(t, "*"))
			done()
		})
	}
}

// BenchmarkSemaphoreAcquireRelease measures Lock(1)+Unlock of a semaphore
// with a permit for every goroutine: all goroutines share one semaphore and
// one Client, nobody waits. ns/op is the time per acquisition and release.
func BenchmarkSemaphoreAcquireRelease(b *testing.B) {
	e := standaloneEnv(b)
	c := e.client(b)
	ctx := context.Background()
	s := c.Semaphore("bench:semaphore")
	if _, err := s.SetSize(ctx, 1<<20); err != nil {
		b.Fatal(err)
	}
	defer s.Delete(ctx)
	benchSemLockUnlock(b, s, 1)
	before := commandCalls(b, e.server)
	b.ResetTimer()
	lockOne := func(ctx context.Context) (*Lease, error) { return s.Lock(ctx, 1) }
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() && benchCycle(b, ctx, lockOne) {
		}
	})
	b.StopTimer()
	if b.Failed() {
		return
	}
	reportCommands(b, commandDelta(b, before, commandCalls(b, e.server)), b.N, "op")
}

// BenchmarkSemaphoreContended measures Lock+Unlock of random 1..2 permits
// of a semaphore of 2 that goroutines on four Clients fight for. ns/op is
// the time per acquisition; attempts/op the acquire script's executions
// per acquisition.
func BenchmarkSemaphoreContended(b *testing.B) {
	const clients, size = 4, 2
	e := standaloneEnv(b)
	ctx := context.Background()
	const name = "bench:semaphore-contended"
	ss := onClients(b, e, clients, func(c *Client) *Semaphore { return c.Semaphore(name) })
	if _, err := ss[0].SetSize(ctx, size); err != nil {
		b.Fatal(err)
	}
	defer ss[0].Delete(ctx)
	benchSemLockUnlock(b, ss[0], 1)
	var inside, overs atomic.Int64
	before := commandCalls(b, e.server)
	b.ResetTimer()
	runOnHandles(b, ss, 2, func(pb *testing.PB, _ int, s *Semaphore) {
		for pb.Next() {
			n := 1 + rand.IntN(size)
			l, err := s.Lock(ctx, n)
			if err != nil {
				b.Errorf("Lock: %v", err)
				return
			}
			if inside.Add(int64(n)) > size {
				overs.Add(1)
			}
			inside.Add(-int64(n))
			if err := l.Unlock(ctx); err != nil {
				b.Errorf("Unlock: %v", err)
				return
			}
		}
	})
	b.StopTimer()
	if overs.Load() > 0 {
		b.Fatalf("permits oversubscribed %d times", overs.Load())
	}
	if b.Failed() {
		return
	}
	benchWaitUnsubscribed(b, e, ss[0].keys.channel)
	d := commandDelta(b, before, commandCalls(b, e.server))
	reportCommands(b, d, b.N, "op")
	scripts := d.calls["evalsha"] + d.calls["eval"]
	b.ReportMetric(float64(scripts-int64(b.N))/float64(b.N), "attempts/op")
}

func benchSemLockUnlock(tb testing.TB, s *Semaphore, n int) {
	tb.Helper()
	benchLockUnlock(tb, func(ctx context.Context) (*Lease, error) { return s.Lock(ctx, n) })
}
