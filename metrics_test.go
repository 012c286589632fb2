package redisync

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// recorder counts what Metrics reports.
type recorder struct {
	mu            sync.Mutex
	acquired      map[string]int
	released      map[string]int
	lost          map[error]int
	renewed       int
	subscriptions int
}

func (r *recorder) metrics() Metrics {
	r.acquired, r.released, r.lost = map[string]int{}, map[string]int{}, map[error]int{}
	return Metrics{
		Acquired: func(p, name string, waited time.Duration) { r.mu.Lock(); r.acquired[p]++; r.mu.Unlock() },
		Released: func(p, name string, held time.Duration) { r.mu.Lock(); r.released[p]++; r.mu.Unlock() },
		Lost:     func(p, name string, reason error) { r.mu.Lock(); r.lost[reason]++; r.mu.Unlock() },
		Renewed: func(n int, err error) {
			r.mu.Lock()
			if err == nil {
				r.renewed += n
			}
			r.mu.Unlock()
		},
		Subscribed: func(d int) { r.mu.Lock(); r.subscriptions += d; r.mu.Unlock() },
	}
}

func (r *recorder) get(f func() int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return f()
}

func TestMetrics(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var r recorder
		c := e.client(t, WithMetrics(r.metrics()), WithWatchdogLease(2*time.Second))
		other := e.client(t)

		l := mustLock(t, ctx, c.Mutex(t.Name()).Lock)
		eventually(t, 5*time.Second, func() bool { return r.get(func() int { return r.renewed }) > 0 }, "no renewal reported")
		require.NoError(t, l.Unlock(ctx))

		f := mustLock(t, ctx, c.FairMutex(t.Name()).Lock)
		require.NoError(t, f.Unlock(ctx))

		// A wait: one subscription, made and dropped.
		held, err := other.Mutex(t.Name() + "/w").Lock(ctx)
		require.NoError(t, err)
		w := c.Mutex(t.Name() + "/w").Acquire(ctx)
		eventually(t, 5*time.Second, func() bool { return r.get(func() int { return r.subscriptions }) == 1 }, "subscription not reported")
		require.NoError(t, held.Unlock(ctx))
		wl := <-w
		require.NoError(t, wl.Err())
		require.NoError(t, wl.Unlock(ctx))
		eventually(t, 5*time.Second, func() bool { return r.get(func() int { return r.subscriptions }) == 0 }, "unsubscription not reported")

		m := c.Mutex(t.Name() + "/lost")
		ll := mustLock(t, ctx, m.Lock)
		_, err = m.ForceUnlock(ctx)
		require.NoError(t, err)
		<-ll.Lost()

		r.mu.Lock()
		defer r.mu.Unlock()
		require.Equal(t, 3, r.acquired["mutex"])
		require.Equal(t, 1, r.acquired["fair"])
		require.Equal(t, 2, r.released["mutex"])
		require.Equal(t, 1, r.released["fair"])
		require.Equal(t, map[error]int{ll.Err(): 1}, r.lost, "one loss, with its reason")
	})
}
