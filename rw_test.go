package redisync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// rwLeft returns the keys of the lock that exist, its fence key aside,
// looked up on the connection of the lock's Client.
func rwLeft(t testing.TB, m *RWMutex) []string {
	t.Helper()
	rc := m.c.rc
	var left []string
	for _, key := range m.keys.all() {
		if key == m.keys.fence {
			continue
		}
		n, err := rc.Do(context.Background(), rc.B().Exists().Key(key).Build()).AsInt64()
		require.NoError(t, err)
		if n == 1 {
			left = append(left, key)
		}
	}
	return left
}

// requireRWFree checks that nobody holds the lock and nothing of it but its
// fence key is left in Redis.
func requireRWFree(t testing.TB, m *RWMutex) {
	t.Helper()
	st, err := m.Inspect(context.Background())
	require.NoError(t, err)
	require.True(t, st.Free(), "lock still held: %+v", st)
	require.Zero(t, st.WritersWaiting)
	eventually(t, 5*time.Second, func() bool { return len(rwLeft(t, m)) == 0 }, "keys left: %v", rwLeft(t, m))
}

// waitState polls Inspect until cond holds.
func waitState(t testing.TB, m *RWMutex, cond func(RWMutexState) bool, msg string) {
	t.Helper()
	var last RWMutexState
	eventually(t, 10*time.Second, func() bool {
		st, err := m.Inspect(context.Background())
		require.NoError(t, err)
		last = st
		return cond(st)
	}, "%s; last state %+v", msg, &last)
}

func TestRWMutexReadersShareWriterExcludes(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		a, b := e.client(t), e.client(t)
		ma, mb := a.RWMutex(t.Name()), b.RWMutex(t.Name())
		require.Equal(t, t.Name(), ma.Name())
		k := ma.keys
		for _, key := range append(k.all(), k.channel) {
			require.Equal(t, slotHash(k.lock), slotHash(key), "%s in another slot", key)
		}

		r1 := mustLock(t, ctx, ma.RLock)
		r2, err := mb.TryRLock(ctx)
		require.NoError(t, err, "readers share")
		require.Equal(t, t.Name(), r1.Name())
		st, err := ma.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, st.Readers)
		require.False(t, st.WriteLocked)
		require.Greater(t, st.ReadTTL, 20*time.Second)
		require.LessOrEqual(t, st.ReadTTL, 30*time.Second)

		_, err = mb.TryLock(ctx)
		require.ErrorIs(t, err, ErrLocked, "a writer while readers hold")
		w := mb.Acquire(ctx)
		waitState(t, ma, func(s RWMutexState) bool { return s.WritersWaiting == 1 }, "writer not waiting")
		_, err = a.RWMutex(t.Name()).TryRLock(ctx)
		require.ErrorIs(t, err, ErrLocked, "a new reader behind a waiting writer")
		require.NoError(t, r1.Unlock(ctx))
		time.Sleep(50 * time.Millisecond)
		require.True(t, pending(w), "writer in while a reader holds")
		require.NoError(t, r2.Unlock(ctx))
		wl := recv(t, w, 5*time.Second, "writer after the last reader")
		require.NotZero(t, wl.Token())

		st, err = ma.Inspect(ctx)
		require.NoError(t, err)
		require.True(t, st.WriteLocked)
		require.Zero(t, st.Readers)
		require.Zero(t, st.WritersWaiting)
		require.Equal(t, 1, st.WriteHolds)
		require.Equal(t, b.ID(), st.WriterClientID())
		require.Equal(t, wl.Token(), st.Token)
		require.Greater(t, st.WriteTTL, 20*time.Second)
		_, err = ma.TryRLock(ctx)
		require.ErrorIs(t, err, ErrLocked, "a reader while a writer holds")
		_, err = ma.TryLock(ctx)
		require.ErrorIs(t, err, ErrLocked, "a second writer")

		r := ma.RAcquire(ctx)
		time.Sleep(50 * time.Millisecond)
		require.True(t, pending(r))
		require.NoError(t, wl.Unlock(ctx))
		rl := recv(t, r, 5*time.Second, "reader after the writer")
		require.Equal(t, wl.Token(), rl.Token(), "a reader's token is the write epoch it reads")
		require.NoError(t, rl.Unlock(ctx))
		require.ErrorIs(t, rl.Unlock(ctx), ErrNotHeld)
		require.ErrorIs(t, rl.Err(), ErrReleased)

		requireLaterToken(t, ctx, ma.TryLock, wl)
		requireRWFree(t, ma)
		e.requireNoSubscriptions(t)
	})
}

func TestRWMutexExclusion(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const clients, readersPer, writersPer = 4, 3, 1
		const readRounds, writeRounds = 30, 10
		ctx := withTimeout(t, 2*time.Minute)
		counterKey := "rwcounter:{" + t.Name() + "}"
		rc := e.rueidisClient(t)
		rc.Do(ctx, rc.B().Del().Key(counterKey).Build())
		var readers, writers, violations, maxReaders atomic.Int32
		var wg sync.WaitGroup
		fail := func(err error) {
			t.Error(err)
		}
		for _, m := range onClients(t, e, clients, func(c *Client) *RWMutex { return c.RWMutex(t.Name()) }) {
			for range writersPer {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range writeRounds {
						l, err := m.Lock(ctx)
						if err != nil {
							fail(err)
							return
						}
						if writers.Add(1) != 1 || readers.Load() != 0 {
							violations.Add(1)
						}
						// A read-modify-write only the write lock protects.
						n, _ := rc.Do(ctx, rc.B().Get().Key(counterKey).Build()).AsInt64()
						rc.Do(ctx, rc.B().Set().Key(counterKey).Value(strconv.FormatInt(n+1, 10)).Build())
						writers.Add(-1)
						if err := l.Unlock(ctx); err != nil {
							fail(err)
							return
						}
					}
				}()
			}
			for range readersPer {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range readRounds {
						l, err := m.RLock(ctx)
						if err != nil {
							fail(err)
							return
						}
						n := readers.Add(1)
						for {
							top := maxReaders.Load()
							if n <= top || maxReaders.CompareAndSwap(top, n) {
								break
							}
						}
						if writers.Load() != 0 {
							violations.Add(1)
						}
						// What readers see does not change under them.
						before, _ := rc.Do(ctx, rc.B().Get().Key(counterKey).Build()).ToString()
						time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
						after, _ := rc.Do(ctx, rc.B().Get().Key(counterKey).Build()).ToString()
						if before != after {
							violations.Add(1)
						}
						readers.Add(-1)
						if err := l.Unlock(ctx); err != nil {
							fail(err)
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		n, err := rc.Do(ctx, rc.B().Get().Key(counterKey).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, violations.Load(), "readers and writers overlapped")
		require.EqualValues(t, clients*writersPer*writeRounds, n, "lost updates")
		require.Greater(t, maxReaders.Load(), int32(1), "readers never shared the lock")
		t.Logf("at most %d readers at once", maxReaders.Load())
		rc.Do(ctx, rc.B().Del().Key(counterKey).Build())
		requireRWFree(t, e.client(t).RWMutex(t.Name()))
	})
}

// readStream runs readers that always overlap until stop closes: each
// holds a share for hold, then takes its next share before it releases the
// current one, so the lock is never free of readers. Only when a writer
// wants in (TryRLock fails) does a reader let go and wait for its turn. It
// returns the number of shares taken so far and how many readers hold one.
func readStream(t *testing.T, m *RWMutex, n int, hold time.Duration, stop <-chan struct{}) (reads, inside *atomic.Int64, wait func()) {
	reads, inside = new(atomic.Int64), new(atomic.Int64)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var l *Lease
			defer func() {
				if l != nil {
					inside.Add(-1)
					l.Unlock(context.Background())
				}
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if l != nil {
					next, err := m.TryRLock(ctx)
					if err == nil {
						reads.Add(1)
						if err := l.Unlock(context.Background()); err != nil {
							t.Error(err)
						}
						l = next
						time.Sleep(hold)
						continue
					}
					if !errors.Is(err, ErrLocked) {
						if ctx.Err() == nil {
							t.Error(err)
						}
						return
					}
					inside.Add(-1)
					if err := l.Unlock(context.Background()); err != nil {
						t.Error(err)
					}
					l = nil
				}
				next, err := m.RLock(ctx)
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				l = next
				inside.Add(1)
				reads.Add(1)
				time.Sleep(hold)
			}
		}()
	}
	go func() { <-stop; cancel() }()
	return reads, inside, wg.Wait
}

func TestRWMutexWriterNotStarved(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		m := e.client(t).RWMutex(t.Name())
		stop := make(chan struct{})
		reads, inside, wait := readStream(t, m, 3, 20*time.Millisecond, stop)
		defer func() {
			close(stop)
			wait()
		}()
		writer := e.client(t).RWMutex(t.Name())
		// The readers' shares always overlap: a writer that only tried
		// would never get in.
		waitState(t, m, func(s RWMutexState) bool { return s.Readers >= 3 }, "readers did not start")
		for range 50 {
			_, err := writer.TryLock(ctx)
			require.ErrorIs(t, err, ErrLocked, "the read stream had a gap")
			time.Sleep(10 * time.Millisecond)
		}
		require.EqualValues(t, 3, inside.Load())
		for round := range 3 {
			start := time.Now()
			l := mustLock(t, ctx, writer.Lock)
			took := time.Since(start)
			require.Zero(t, inside.Load(), "a reader inside with the writer")
			require.Less(t, took, 10*time.Second, "writer starved by overlapping readers")
			t.Logf("round %d: writer in after %v", round, took)
			before := reads.Load()
			time.Sleep(20 * time.Millisecond)
			require.Equal(t, before, reads.Load(), "a reader got in while the writer held")
			require.NoError(t, l.Unlock(ctx))
			// The readers go on after the writer.
			eventually(t, 10*time.Second, func() bool { return reads.Load() > before+6 }, "readers did not resume")
		}
	})
}

func TestRWMutexReadersNotStarvedByWriters(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		var writes atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, m := range onClients(t, e, 2, func(c *Client) *RWMutex { return c.RWMutex(t.Name()) }) {
			for range 2 {
				repeatUntil(t, &wg, stop, func() error {
					l, err := m.Lock(ctx)
					if err != nil {
						return err
					}
					writes.Add(1)
					time.Sleep(20 * time.Millisecond)
					return l.Unlock(ctx)
				})
			}
		}
		defer func() {
			close(stop)
			wg.Wait()
		}()
		eventually(t, 10*time.Second, func() bool { return writes.Load() > 5 }, "writers did not start")
		reader := e.client(t).RWMutex(t.Name())
		for round := range 5 {
			start := time.Now()
			l := mustLock(t, ctx, reader.RLock)
			took := time.Since(start)
			require.Less(t, took, 10*time.Second, "reader starved by a stream of writers")
			t.Logf("round %d: reader in after %v", round, took)
			require.NoError(t, l.Unlock(ctx))
			time.Sleep(30 * time.Millisecond)
		}
	})
}

func TestRWMutexDowngrade(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.client(t).RWMutex(t.Name())
		other := e.client(t).RWMutex(t.Name())

		w := mustLock(t, ctx, m.Lock)
		// Another writer waits; it keeps new readers out, but not the
		// writer's own.
		ow := other.Acquire(ctx)
		waitState(t, m, func(s RWMutexState) bool { return s.WritersWaiting == 1 }, "other writer not waiting")
		start := time.Now()
		r := mustLock(t, w.Context(), m.RLock)
		require.Less(t, time.Since(start), 5*time.Second, "the downgrade waited")
		require.Equal(t, w.Token(), r.Token(), "the downgraded reader reads the writer's epoch")
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.True(t, st.WriteLocked)
		require.Equal(t, 1, st.Readers)

		// Still the writer: the read lease's context re-enters the write
		// lock.
		w2 := mustLock(t, r.Context(), m.TryLock)
		require.Equal(t, w.Token(), w2.Token())
		require.NoError(t, w2.Unlock(ctx))

		require.NoError(t, w.Unlock(ctx))
		require.NoError(t, r.Err(), "the read lease outlives the write lease")
		st, err = m.Inspect(ctx)
		require.NoError(t, err)
		require.False(t, st.WriteLocked)
		require.Equal(t, 1, st.Readers)
		require.Equal(t, 1, st.WritersWaiting)
		time.Sleep(50 * time.Millisecond)
		require.True(t, pending(ow), "a writer got in while the downgraded reader reads")
		_, err = other.TryRLock(ctx)
		require.ErrorIs(t, err, ErrLocked, "a new reader behind the waiting writer")

		// Now a plain reader: no upgrade.
		_, err = m.Lock(r.Context())
		require.ErrorIs(t, err, ErrUpgrade)

		require.NoError(t, r.Unlock(ctx))
		ol := recv(t, ow, 5*time.Second, "waiting writer after the downgraded reader")
		require.Greater(t, ol.Token(), w.Token())
		require.NoError(t, ol.Unlock(ctx))
		requireRWFree(t, m)
	})
}

func TestRWMutexUpgradeRefused(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		m := e.client(t).RWMutex(t.Name())
		r := mustLock(t, ctx, m.RLock)
		start := time.Now()
		l, err := m.Lock(r.Context())
		require.ErrorIs(t, err, ErrUpgrade)
		require.Nil(t, l)
		_, err = m.TryLock(r.Context())
		require.ErrorIs(t, err, ErrUpgrade)
		al := delivered(t, m.Acquire(r.Context()))
		require.ErrorIs(t, al.Err(), ErrUpgrade)
		require.ErrorIs(t, al.Unlock(ctx), ErrNotHeld)
		// A context derived from the read lease's is refused as well.
		derived, dcancel := context.WithTimeout(r.Context(), time.Minute)
		defer dcancel()
		_, err = m.Lock(derived)
		require.ErrorIs(t, err, ErrUpgrade)
		require.Less(t, time.Since(start), 5*time.Second, "refused at once")

		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, st.Readers)
		require.False(t, st.WriteLocked)
		require.Zero(t, st.WritersWaiting, "a refused upgrade keeps no reader out")
		r2 := mustLock(t, ctx, e.client(t).RWMutex(t.Name()).TryRLock)
		require.NoError(t, r2.Unlock(ctx))

		// Once the read lease ended, its context locks like any other.
		require.NoError(t, r.Unlock(ctx))
		l, err = m.TryLock(context.WithoutCancel(r.Context()))
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
		requireRWFree(t, m)
	})
}

func TestRWMutexReentrant(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		m := e.client(t).RWMutex(t.Name())

		// Reads: a re-entry does not wait behind a waiting writer, which
		// would deadlock.
		r1 := mustLock(t, ctx, m.RLock)
		ow := e.client(t).RWMutex(t.Name()).Acquire(ctx)
		waitState(t, m, func(s RWMutexState) bool { return s.WritersWaiting == 1 }, "writer not waiting")
		_, err := m.TryRLock(ctx)
		require.ErrorIs(t, err, ErrLocked, "without the lease's context a reader waits")
		r2 := mustLock(t, r1.Context(), m.RLock)
		r3 := mustLock(t, r2.Context(), m.TryRLock)
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, st.Readers)
		// Out of order: each Unlock gives one share back.
		require.NoError(t, r1.Unlock(ctx))
		require.NoError(t, r3.Unlock(ctx))
		st, err = m.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, st.Readers)
		require.True(t, pending(ow))
		// A lease that ended re-enters nothing: its context waits as any.
		_, err = m.TryRLock(r1.Context())
		require.ErrorIs(t, err, ErrLocked)
		require.NoError(t, r2.Unlock(ctx))
		wl := recv(t, ow, 5*time.Second, "writer")
		require.NoError(t, wl.Unlock(ctx))

		// Writes: re-entries share the ownership and token, nested.
		require.NoError(t, nested(ctx, m.Lock, 4, func() {
			st, err := m.Inspect(ctx)
			require.NoError(t, err)
			require.Equal(t, 4, st.WriteHolds)
			require.Zero(t, st.Readers)
		}))
		// Another client's context does not re-enter.
		l := mustLock(t, ctx, m.Lock)
		_, err = e.client(t).RWMutex(t.Name()).TryLock(l.Context())
		require.ErrorIs(t, err, ErrLocked)
		_, err = e.client(t).RWMutex(t.Name()).TryRLock(l.Context())
		require.ErrorIs(t, err, ErrLocked)
		require.NoError(t, l.Unlock(ctx))
		requireRWFree(t, m)
	})
}

func TestRWMutexLeaseLoss(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, WithWatchdogLease(600*time.Millisecond))
		m := c.RWMutex(t.Name())

		// Readers: ForceUnlock ends every share.
		r1 := mustLock(t, ctx, m.RLock)
		r2 := mustLock(t, ctx, m.RLock)
		ok, err := e.client(t).RWMutex(t.Name()).ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		for _, r := range []*Lease{r1, r2} {
			requireLost(t, r, 5*time.Second, ErrExpired)
			err := r.Unlock(ctx)
			require.ErrorIs(t, err, ErrNotHeld)
			require.ErrorIs(t, err, ErrExpired)
		}

		// A writer likewise.
		w := mustLock(t, ctx, m.Lock)
		ok, err = m.ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		requireLost(t, w, 5*time.Second, ErrExpired)
		ok, err = m.ForceUnlock(ctx)
		require.NoError(t, err)
		require.False(t, ok, "nothing to break")

		// Re-entering a lease whose lock is gone in Redis, before the
		// watchdog noticed (Clients that learn of a loss at their next
		// renewal only, seconds away): an error at once, not a wait nor a
		// new lock.
		slow := e.renewalClient(t).RWMutex(t.Name())
		r := mustLock(t, ctx, slow.RLock)
		w, err = e.renewalClient(t).RWMutex(t.Name() + "/w").Lock(ctx)
		require.NoError(t, err)
		_, err = slow.ForceUnlock(ctx)
		require.NoError(t, err)
		_, err = slow.RLock(r.Context())
		require.ErrorIs(t, err, ErrNotHeld)
		wm := w.h.c.RWMutex(t.Name() + "/w")
		_, err = wm.ForceUnlock(ctx)
		require.NoError(t, err)
		_, err = wm.RLock(w.Context())
		require.ErrorIs(t, err, ErrNotHeld, "a downgrade of a lost write lease")
		// The refusal reports the lease's loss (see
		// TestReentryAfterUnnoticedLossIsRefused for the write re-entry).
		require.ErrorIs(t, w.Err(), ErrExpired)
		require.ErrorIs(t, r.Err(), ErrExpired)
		require.ErrorIs(t, r.Unlock(ctx), ErrNotHeld)
		require.ErrorIs(t, w.Unlock(ctx), ErrNotHeld)
		st, err := wm.Inspect(ctx)
		require.NoError(t, err)
		require.True(t, st.Free())
	})
}

func TestRWMutexFixedLease(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		m := e.client(t).RWMutex(t.Name(), WithFixedLease(400*time.Millisecond))
		r := mustLock(t, ctx, m.RLock)
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.LessOrEqual(t, st.ReadTTL, 400*time.Millisecond)
		requireLost(t, r, 5*time.Second, ErrExpired)
		// The writer gets in once the share ran out, woken by its timer.
		w := mustLock(t, ctx, e.client(t).RWMutex(t.Name()).Lock)
		require.ErrorIs(t, r.Unlock(ctx), ErrNotHeld)
		require.NoError(t, w.Unlock(ctx))

		w, err = m.Lock(ctx)
		require.NoError(t, err)
		st, err = m.Inspect(ctx)
		require.NoError(t, err)
		require.LessOrEqual(t, st.WriteTTL, 400*time.Millisecond)
		<-w.Lost()
		require.ErrorIs(t, w.Err(), ErrExpired)
		r, err = e.client(t).RWMutex(t.Name()).RLock(ctx)
		require.NoError(t, err)
		require.NoError(t, r.Unlock(ctx))
	})
}

func TestRWMutexReaderCrashWhileOthersRenew(t *testing.T) {
	e := ownServer(t)
	ctx := withTimeout(t, time.Minute)
	const lease = time.Second
	crashing, p := e.proxied(t, WithWatchdogLease(lease))
	healthy := e.client(t, WithWatchdogLease(lease))
	const name = "reader-crash"
	m := healthy.RWMutex(name)

	dead := mustLock(t, ctx, crashing.RWMutex(name).RLock)
	alive := mustLock(t, ctx, m.RLock)
	st, err := m.Inspect(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, st.Readers)

	// The crashing reader's process goes silent: no renewal, no release.
	p.Blackhole()
	crashed := time.Now()
	waitState(t, m, func(s RWMutexState) bool { return s.Readers == 1 }, "the dead reader's share stayed")
	gone := time.Since(crashed)
	t.Logf("dead share gone %v after the crash (lease %v)", gone, lease)
	requireLost(t, dead, 5*time.Second, ErrConnectionLost)
	// Several leases later the live reader still holds its share.
	time.Sleep(3 * lease)
	require.NoError(t, alive.Err())
	st, err = m.Inspect(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Readers)
	require.Greater(t, st.ReadTTL, time.Duration(0))
	_, err = m.TryLock(ctx)
	require.ErrorIs(t, err, ErrLocked, "the live reader keeps writers out")

	w := e.client(t).RWMutex(name).Acquire(ctx)
	waitState(t, m, func(s RWMutexState) bool { return s.WritersWaiting == 1 }, "writer not waiting")
	require.NoError(t, alive.Unlock(ctx))
	wl := recv(t, w, 5*time.Second, "writer after the live reader left")
	require.NoError(t, wl.Unlock(ctx))
	p.Heal()
}

func TestRWMutexWaitingWriterDies(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		c := e.client(t)
		m := c.RWMutex(t.Name())
		r := mustLock(t, ctx, m.RLock)
		// A writer registers as waiting and is never heard of again.
		dead := c.newOwner()
		res, err := m.attempt(ctx, rwLockScript, "write lock",
			[]string{dead, "#1", "30000", "60000", "n", rwMillis(rwRegistration)}, func(context.Context) {})
		require.NoError(t, err)
		code, _, err := parseRW(res)
		require.NoError(t, err)
		require.Zero(t, code)
		_, err = m.TryRLock(ctx)
		require.ErrorIs(t, err, ErrLocked, "the waiting writer keeps readers out")
		start := time.Now()
		r2 := mustLock(t, ctx, e.client(t).RWMutex(t.Name()).RLock)
		waited := time.Since(start)
		t.Logf("reader in %v after the writer's last attempt", waited)
		require.Less(t, waited, 10*time.Second)
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.Zero(t, st.WritersWaiting)
		require.Equal(t, 2, st.Readers)
		require.NoError(t, r.Unlock(ctx))
		require.NoError(t, r2.Unlock(ctx))
		requireRWFree(t, m)
	})
}

// slowFallback makes m's waiters look again on their own only after a long
// time, so that a prompt acquisition proves a wake-up message.
func slowFallback(m *RWMutex) *RWMutex {
	m.registration, m.refresh = 60*time.Second, 30*time.Second
	return m
}

func TestRWMutexWakeUps(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const readers = 10
		ctx := withTimeout(t, time.Minute)
		holder := e.client(t)
		hm := holder.RWMutex(t.Name())

		// A writer's release wakes every waiting reader of a Client.
		w := mustLock(t, ctx, hm.Lock)
		c := e.client(t)
		waiting := make([]<-chan *Lease, readers)
		for i := range waiting {
			waiting[i] = slowFallback(c.RWMutex(t.Name())).RAcquire(ctx)
		}
		channel := hm.keys.channel
		eventually(t, 5*time.Second, func() bool {
			return subscribed(c, channel, readers)
		}, "readers did not subscribe")
		// Each reader looks once more when it joined the subscription.
		time.Sleep(200 * time.Millisecond)
		before := scriptCalls(t, e)
		require.NoError(t, w.Unlock(ctx))
		var held []*Lease
		for _, ch := range waiting {
			held = append(held, recv(t, ch, 10*time.Second, "reader woken by the writer's release"))
		}
		// The release, then about one attempt per reader.
		attempts := scriptCalls(t, e) - before - 1
		require.LessOrEqual(t, attempts, int64(readers+readers/2), "attempts for %d readers", readers)
		st, err := hm.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, readers, st.Readers)

		// The last reader's release wakes a waiting writer; the others' do
		// not need to.
		wch := slowFallback(holder.RWMutex(t.Name())).Acquire(ctx)
		waitState(t, hm, func(s RWMutexState) bool { return s.WritersWaiting == 1 }, "writer not waiting")
		for _, l := range held[1:] {
			require.NoError(t, l.Unlock(ctx))
		}
		time.Sleep(50 * time.Millisecond)
		require.True(t, pending(wch), "writer in while a reader holds")
		require.NoError(t, held[0].Unlock(ctx))
		wl := recv(t, wch, 10*time.Second, "writer woken by the last reader")

		// A waiting writer that gives up lets the readers behind it go.
		w2 := slowFallback(c.RWMutex(t.Name()))
		wctx, wcancel := context.WithCancel(ctx)
		w2ch := w2.Acquire(wctx)
		r := slowFallback(c.RWMutex(t.Name())).RAcquire(ctx)
		waitState(t, hm, func(s RWMutexState) bool { return s.WritersWaiting == 1 }, "second writer not waiting")
		// The reader waits too, kept out by the writer that holds.
		eventually(t, 5*time.Second, func() bool {
			n, err := holder.rc.Do(ctx, holder.rc.B().Zcard().Key(hm.keys.readersWaiting).Build()).AsInt64()
			return err == nil && n == 1
		}, "the reader is not waiting")
		require.NoError(t, wl.Unlock(ctx))
		// Readers first: they waited for the writer that left.
		rl := recv(t, r, 10*time.Second, "reader after the writer")
		require.True(t, pending(w2ch))
		r2 := slowFallback(c.RWMutex(t.Name())).RAcquire(ctx)
		time.Sleep(100 * time.Millisecond)
		require.True(t, pending(r2), "a new reader overtook a waiting writer")
		wcancel()
		require.ErrorIs(t, delivered(t, w2ch).Err(), context.Canceled)
		rl2 := recv(t, r2, 10*time.Second, "reader after the waiting writer gave up")
		require.NoError(t, rl.Unlock(ctx))
		require.NoError(t, rl2.Unlock(ctx))
		requireRWFree(t, hm)
		e.requireNoSubscriptions(t)
	})
}

func TestRWMutexRetriedUnlock(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		a, b := e.client(t), e.client(t)
		m := a.RWMutex(t.Name())
		r := mustLock(t, ctx, m.RLock)
		// The release reaches Redis, its reply is lost; a writer comes and
		// goes. The retry reports success.
		st, err := a.rwReleaseRead(ctx, m.keys, r.h.owner)
		require.NoError(t, err)
		require.Equal(t, freed, st)
		r.mu.Lock()
		r.unsure = time.Now()
		r.mu.Unlock()
		wl := mustLock(t, ctx, b.RWMutex(t.Name()).TryLock)
		require.NoError(t, wl.Unlock(ctx))
		require.NoError(t, r.Unlock(ctx))
		require.ErrorIs(t, r.Err(), ErrReleased)

		// A writer's: the retry neither fails nor frees the next writer.
		w := mustLock(t, ctx, m.Lock)
		inner := mustLock(t, w.Context(), m.Lock)
		st, err = a.rwReleaseWrite(ctx, m.keys, w.h.owner, inner.hold)
		require.NoError(t, err)
		require.Equal(t, stillHeld, st)
		require.NoError(t, inner.Unlock(ctx))
		s, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, s.WriteHolds)
		st, err = a.rwReleaseWrite(ctx, m.keys, w.h.owner, w.hold)
		require.NoError(t, err)
		require.Equal(t, freed, st)
		other := mustLock(t, ctx, b.RWMutex(t.Name()).TryLock)
		require.NoError(t, w.Unlock(ctx))
		s, err = m.Inspect(ctx)
		require.NoError(t, err)
		require.True(t, s.WriteLocked)
		require.Equal(t, b.ID(), s.WriterClientID(), "b's lock untouched")
		require.NoError(t, other.Unlock(ctx))
	})
}

func TestRWMutexLocker(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		m := c.RWMutex(t.Name())
		var rl, wl sync.Locker = m.RLocker(), m.Locker()
		// Readers share through one RLocker.
		rl.Lock()
		rl.Lock()
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, st.Readers)
		rl.Unlock()
		rl.Unlock()
		require.Nil(t, rl.(*RLocker).Lease())

		counter := 0
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wl.Lock()
				counter++
				wl.Unlock()
			}()
		}
		wg.Wait()
		require.Equal(t, 8, counter)
		require.NoError(t, wl.(*Locker).Err())
		requireRWFree(t, m)

		// Bad handles: Lock returns at once, without a lease.
		type adapter interface {
			sync.Locker
			Err() error
			Lease() *Lease
		}
		for _, lk := range []adapter{c.RWMutex("").RLocker(), c.RWMutex("").Locker(), (*RWMutex)(nil).Locker(),
			(*RWMutex)(nil).RLocker(), new(RLocker)} {
			lk.Lock()
			require.ErrorIs(t, lk.Err(), ErrInvalidArgument)
			require.Nil(t, lk.Lease())
			notPanics(t, "Unlock after a failed Lock", lk.Unlock)
		}
		// An RLocker waits for the writer.
		closing := e.client(t)
		cw := mustLock(t, ctx, closing.RWMutex(t.Name()).Lock)
		blocked := e.client(t).RWMutex(t.Name()).RLocker()
		returned := make(chan struct{})
		go func() { blocked.Lock(); close(returned) }()
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, cw.Unlock(ctx))
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Fatal("RLocker.Lock did not return")
		}
		require.NoError(t, blocked.Err())
		require.NotNil(t, blocked.Lease())
		blocked.Unlock()
		require.Nil(t, blocked.Lease())
	})
}

func TestRWMutexBadInput(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)

		notPanics(t, "nil Client", func() { requireRWMutexFails(t, (*Client)(nil).RWMutex(t.Name()), ErrInvalidArgument) })
		requireRWMutexFails(t, nil, ErrInvalidArgument)
		requireRWMutexFails(t, new(RWMutex), ErrInvalidArgument)
		require.Equal(t, "", (*RWMutex)(nil).Name())
		requireRWMutexFails(t, c.RWMutex(""), ErrInvalidArgument)
		for _, d := range []time.Duration{0, -time.Second, time.Nanosecond, 500 * time.Microsecond} {
			requireRWMutexFails(t, c.RWMutex(t.Name(), WithFixedLease(d)), ErrInvalidArgument)
		}

		var nilCtx context.Context
		m := c.RWMutex(t.Name(), nil)
		for _, f := range []func(context.Context) (*Lease, error){m.RLock, m.TryRLock, m.Lock, m.TryLock} {
			_, err := f(nilCtx)
			require.ErrorIs(t, err, ErrInvalidArgument)
		}
		_, err := m.Inspect(nilCtx)
		require.ErrorIs(t, err, ErrInvalidArgument)
		_, err = m.ForceUnlock(nilCtx)
		require.ErrorIs(t, err, ErrInvalidArgument)
		requireFailedLease(t, delivered(t, m.RAcquire(nilCtx)), ErrInvalidArgument)
		requireFailedLease(t, delivered(t, m.Acquire(nilCtx)), ErrInvalidArgument)

		done, cancel := context.WithCancel(ctx)
		cancel()
		for _, f := range []func(context.Context) (*Lease, error){m.RLock, m.TryRLock, m.Lock, m.TryLock} {
			_, err := f(done)
			require.ErrorIs(t, err, context.Canceled)
		}
		requireFailedLease(t, delivered(t, m.RAcquire(done)), context.Canceled)
		requireFailedLease(t, delivered(t, m.Acquire(done)), context.Canceled)
		requireRWFree(t, m)

		// Odd names work and keep their keys in one slot.
		for i, name := range badInputNames() {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				m := c.RWMutex(name)
				k := m.keys
				for _, key := range append(k.all(), k.channel) {
					require.Equal(t, slotHash(k.lock), slotHash(key))
				}
				r := mustLock(t, ctx, m.TryRLock)
				w, err := m.TryLock(r.Context())
				require.ErrorIs(t, err, ErrUpgrade)
				require.Nil(t, w)
				require.NoError(t, r.Unlock(ctx))
				w, err = m.TryLock(ctx)
				require.NoError(t, err)
				st, err := m.Inspect(ctx)
				require.NoError(t, err)
				require.True(t, st.WriteLocked)
				require.NoError(t, w.Unlock(ctx))
				requireRWFree(t, m)
			})
		}

		// A Mutex and an RWMutex of one name are different locks.
		ml := mustLock(t, ctx, c.Mutex(t.Name()).TryLock)
		wl := mustLock(t, ml.Context(), m.TryLock)
		require.NoError(t, wl.Unlock(ctx))
		require.NoError(t, ml.Unlock(ctx))

		// Closed Client.
		closed := e.client(t)
		cm := closed.RWMutex(t.Name())
		held := mustLock(t, ctx, cm.RLock)
		require.NoError(t, closed.Close())
		requireRWMutexFails(t, cm, ErrClosed)
		<-held.Lost()
		require.ErrorIs(t, held.Err(), ErrClosed)
		require.ErrorIs(t, held.Unlock(ctx), ErrNotHeld)
		requireRWFree(t, m)
	})
}

func TestRWMutexWrongType(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		rc := e.rueidisClient(t)
		m := e.client(t).RWMutex(t.Name())
		plants := []struct {
			what string
			key  string
			cmd  rueidis.Completed
		}{
			{"string at the writer key", m.keys.lock, rc.B().Set().Key(m.keys.lock).Value("precious").Build()},
			{"hash at the writer key", m.keys.lock, rc.B().Hset().Key(m.keys.lock).FieldValue().FieldValue("foo", "bar").Build()},
			{"string at the readers key", m.keys.readers, rc.B().Set().Key(m.keys.readers).Value("precious").Build()},
			{"list at the waiting writers key", m.keys.writersWaiting, rc.B().Rpush().Key(m.keys.writersWaiting).Element("a").Build()},
		}
		for _, p := range plants {
			t.Run(p.what, func(t *testing.T) {
				require.NoError(t, rc.Do(ctx, p.cmd).Error())
				defer rc.Do(ctx, rc.B().Del().Key(p.key).Build())
				dump := func() string {
					s, err := rc.Do(ctx, rc.B().Dump().Key(p.key).Build()).ToString()
					require.NoError(t, err)
					return s
				}
				want := dump()
				for what, f := range map[string]func(context.Context) (*Lease, error){
					"RLock": m.RLock, "TryRLock": m.TryRLock, "Lock": m.Lock, "TryLock": m.TryLock,
				} {
					_, err := f(ctx)
					require.ErrorIs(t, err, ErrWrongType, what)
				}
				requireFailedLease(t, delivered(t, m.RAcquire(ctx)), ErrWrongType)
				requireFailedLease(t, delivered(t, m.Acquire(ctx)), ErrWrongType)
				_, err := m.Inspect(ctx)
				require.ErrorIs(t, err, ErrWrongType, "Inspect")
				_, err = m.ForceUnlock(ctx)
				require.ErrorIs(t, err, ErrWrongType, "ForceUnlock")
				require.Equal(t, want, dump(), "value changed")
				pttl, err := rc.Do(ctx, rc.B().Pttl().Key(p.key).Build()).AsInt64()
				require.NoError(t, err)
				require.Equal(t, int64(-1), pttl, "expiry set")
				for _, k := range m.keys.all() {
					if k != p.key {
						n, err := rc.Do(ctx, rc.B().Exists().Key(k).Build()).AsInt64()
						require.NoError(t, err)
						require.Zero(t, n, "%s written", k)
					}
				}
			})
		}
	})
}

func TestRWMutexCancellationsLeaveNothing(t *testing.T) {
	names := []string{"a", "b", "c", "{d}"}
	// Mostly too short to acquire, now and then long enough to wait behind
	// others.
	wait := func() time.Duration {
		if rand.IntN(4) == 0 {
			return 10 * rand.N(5*time.Millisecond)
		}
		return rand.N(5 * time.Millisecond)
	}
	eachEnv(t, func(t *testing.T, e *env) {
		var reads, writes, violations atomic.Int64
		var inside [4]struct{ readers, writers atomic.Int32 }
		cancellations(t, e, "rwcancel", soak(6000, 60000), wait, func(ctx context.Context, c *Client, _ []*Client) (*Lease, error) {
			n := rand.IntN(len(names))
			m := c.RWMutex(names[n])
			write := rand.IntN(3) == 0
			acquire := oneOf(m.RLock, m.TryRLock, waited(m.RAcquire))
			if write {
				acquire = oneOf(m.Lock, m.TryLock, waited(m.Acquire))
			}
			l, err := acquire(ctx)
			if err != nil {
				return nil, err
			}
			in := &inside[n]
			if write {
				writes.Add(1)
				if in.writers.Add(1) != 1 || in.readers.Load() != 0 {
					violations.Add(1)
				}
			} else {
				reads.Add(1)
				if in.readers.Add(1); in.writers.Load() != 0 {
					violations.Add(1)
				}
			}
			time.Sleep(rand.N(200 * time.Microsecond))
			if write {
				in.writers.Add(-1)
			} else {
				in.readers.Add(-1)
			}
			return l, nil
		})
		t.Logf("%d reads, %d writes", reads.Load(), writes.Load())
		require.NotZero(t, reads.Load())
		require.NotZero(t, writes.Load())
		require.Zero(t, violations.Load(), "readers and writers overlapped")
	})
}

func TestRWMutexRedisRestart(t *testing.T) {
	e, holder, waiter, done := restartPair(t, time.Second)
	ctx := withTimeout(t, time.Minute)
	const locks = 3
	var held []*Lease
	var writers, readers []<-chan *Lease
	for i := range locks {
		name := fmt.Sprintf("rwrestart:%d", i)
		m := holder.RWMutex(name)
		for range 2 {
			l := mustLock(t, ctx, m.RLock)
			held = append(held, l)
		}
		// A writer waits for the readers; a reader waits behind it.
		wm := waiter.RWMutex(name)
		writers = append(writers, wm.Acquire(ctx))
		waitState(t, wm, func(s RWMutexState) bool { return s.WritersWaiting == 1 }, "writer not waiting")
		readers = append(readers, waiter.RWMutex(name).RAcquire(ctx))
	}
	// Per lock, the writer listens on its Client's channel, the reader on
	// the lock's.
	e.awaitChannels(t, 2*locks, 5*time.Second, "waiters did not subscribe")

	require.NoError(t, e.server.Restart())
	for _, l := range held {
		requireLost(t, l, 10*time.Second, ErrExpired, ErrConnectionLost)
		require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
	}
	// The restart took the writers' registrations too: whoever looks
	// first gets in.
	unlockAll(t, ctx, append(writers, readers...), 10*time.Second)
	for i := range locks {
		m := waiter.RWMutex(fmt.Sprintf("rwrestart:%d", i))
		requireRWFree(t, m)
	}
	done()
}

func TestRWMutexReplicaAck(t *testing.T) {
	_, c, replica := ackedClient(t)
	ctx := context.Background()
	m := c.RWMutex("rwacked")
	r := mustLock(t, ctx, m.RLock)
	requireReply(t, replica, "1", "the replica has the share when RLock returns", "ZCARD", m.keys.readers)
	require.NoError(t, r.Unlock(ctx))

	require.NoError(t, replica.Pause())
	defer replica.Resume()
	_, err := m.TryRLock(ctx)
	require.ErrorIs(t, err, ErrNotReplicated)
	_, err = m.TryLock(ctx)
	require.ErrorIs(t, err, ErrNotReplicated)
	st, err := m.Inspect(ctx)
	require.NoError(t, err)
	require.True(t, st.Free(), "nothing held after a failed acknowledgement")
	require.NoError(t, replica.Resume())
	w := mustLock(t, ctx, m.Lock)
	require.NoError(t, w.Unlock(ctx))
}

// BenchmarkRWMutexReadHeavy measures a read-heavy load on one lock: 95% of
// the operations take and release a read lease, 5% the write lease, from
// goroutines on four Clients. ops/s counts both.
func BenchmarkRWMutexReadHeavy(b *testing.B) {
	const clients = 4
	e := standaloneEnv(b)
	ctx := context.Background()
	const name = "bench:rw:readheavy"
	ms := onClients(b, e, clients, func(c *Client) *RWMutex { return c.RWMutex(name) })
	for i := range ms {
		l, err := ms[i].Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		l, err = ms[i].RLock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	benchWaitUnsubscribed(b, e, ms[0].keys.channel)
	var reads, writes, readers, writers, violations atomic.Int64
	before := commandCalls(b, e.server)
	b.ResetTimer()
	start := time.Now()
	runOnHandles(b, ms, 4, func(pb *testing.PB, i int, m *RWMutex) {
		rnd := rand.New(rand.NewPCG(uint64(i+1), 7))
		for pb.Next() {
			if rnd.IntN(100) < 5 {
				l, err := m.Lock(ctx)
				if err != nil {
					b.Errorf("Lock: %v", err)
					return
				}
				if writers.Add(1) != 1 || readers.Load() != 0 {
					violations.Add(1)
				}
				writers.Add(-1)
				writes.Add(1)
				if err := l.Unlock(ctx); err != nil {
					b.Errorf("Unlock: %v", err)
					return
				}
				continue
			}
			l, err := m.RLock(ctx)
			if err != nil {
				b.Errorf("RLock: %v", err)
				return
			}
			readers.Add(1)
			if writers.Load() != 0 {
				violations.Add(1)
			}
			readers.Add(-1)
			reads.Add(1)
			if err := l.Unlock(ctx); err != nil {
				b.Errorf("Unlock: %v", err)
				return
			}
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if b.Failed() {
		return
	}
	if violations.Load() != 0 {
		b.Fatalf("%d exclusion violations", violations.Load())
	}
	d := commandDelta(b, before, commandCalls(b, e.server))
	reportCommands(b, d, b.N, "op")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(writes.Load())*100/float64(max(1, reads.Load()+writes.Load())), "%writes")
}

func TestRWMutexMetrics(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var r recorder
		m := e.client(t, WithMetrics(r.metrics())).RWMutex(t.Name())
		r1 := mustLock(t, ctx, m.RLock)
		r2 := mustLock(t, ctx, m.RLock)
		require.NoError(t, r1.Unlock(ctx))
		require.NoError(t, r2.Unlock(ctx))
		w := mustLock(t, ctx, m.Lock)
		_, err := m.ForceUnlock(ctx)
		require.NoError(t, err)
		require.ErrorIs(t, w.Unlock(ctx), ErrNotHeld)

		r.mu.Lock()
		defer r.mu.Unlock()
		require.Equal(t, map[string]int{"rwmutex.read": 2, "rwmutex.write": 1}, r.acquired)
		require.Equal(t, map[string]int{"rwmutex.read": 2}, r.released)
		require.Equal(t, map[error]int{ErrExpired: 1}, r.lost)
	})
}
