package redisync

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Many acquisitions at once: the load and cancellation scenarios.

// spread runs f total times on workers goroutines: f gets the worker's
// number and the call's (0 to total-1, in the order the calls start).
func spread(total, workers int, f func(worker, call int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := int(next.Add(1)) - 1
				if n >= total {
					return
				}
				f(w, n)
			}
		}()
	}
	wg.Wait()
}

// churn makes total acquisitions on workers goroutines, most of them given
// up before they acquire or while they wait: acquire gets the worker's
// number and a context that ends after wait(). A lease acquired is held for a moment and unlocked; an
// Unlock that finds it lost (ErrNotHeld) is no failure. It returns how many
// leases were acquired.
func churn(t *testing.T, total, workers int, wait func() time.Duration, acquire func(ctx context.Context, worker int) (*Lease, error)) int {
	var acquired atomic.Int64
	spread(total, workers, func(w, _ int) {
		ctx, cancel := context.WithTimeout(context.Background(), wait())
		defer cancel()
		l, err := acquire(ctx, w)
		if err != nil {
			return
		}
		acquired.Add(1)
		time.Sleep(rand.N(200 * time.Microsecond))
		if err := l.Unlock(context.Background()); err != nil && !errors.Is(err, ErrNotHeld) {
			t.Error(err)
		}
	})
	return int(acquired.Load())
}

// cancellations runs churn (total acquisitions on 24 goroutines, each
// ending after wait()) over three Clients of e with prefix: acquire gets
// the worker's Client and all three. It checks that leases were acquired
// and, once all ended, that nothing is left: nothing held or queued, no
// subscription, no goroutine.
func cancellations(t *testing.T, e *env, prefix string, total int, wait func() time.Duration,
	acquire func(ctx context.Context, c *Client, clients []*Client) (*Lease, error)) {
	t.Helper()
	noLeak := leakCheck(t)
	clients := e.clients(t, 3, WithPrefix(prefix))
	acquired := churn(t, total, 24, wait, func(ctx context.Context, w int) (*Lease, error) {
		return acquire(ctx, clients[w%len(clients)], clients)
	})
	t.Logf("%d attempts, %d acquired", total, acquired)
	require.NotZero(t, acquired)
	e.requireNothingLeft(t, prefix+":")
	noLeak(clients)
}

// errNoLease is what a churn acquisition that takes nothing returns.
var errNoLease = errors.New("no lease taken")

// below returns random durations below d.
func below(d time.Duration) func() time.Duration {
	return func() time.Duration { return rand.N(d) }
}

// oneOf returns one of the forms of acquisition, picked at random.
func oneOf(forms ...func(context.Context) (*Lease, error)) func(context.Context) (*Lease, error) {
	return forms[rand.IntN(len(forms))]
}

// waited makes an Acquire a form like Lock: it waits for the Lease until
// ctx ends.
func waited(acquire func(context.Context) <-chan *Lease) func(context.Context) (*Lease, error) {
	return func(ctx context.Context) (*Lease, error) {
		select {
		case l := <-acquire(ctx):
			return l, l.Err()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// repeatUntil runs f over and over on a goroutine of wg, until stop is
// closed or f fails (a test error).
func repeatUntil(t testing.TB, wg *sync.WaitGroup, stop <-chan struct{}, f func() error) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := f(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
}
