package redisync

import (
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
			c.notify.mu.Lock()
			defer c.notify.mu.Unlock()
			s := c.notify.subs[m.keys.channel]
			return s != nil && s.confirms.Load() == 1
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
		require.Less(t, gap, 500*time.Millisecond, "the lock was left free while its waiters slept")
		requireRWFree(t, m)
	})
}
