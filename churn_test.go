package redisync

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync/internal/testenv"
)

// Many acquisitions at once: the load and cancellation scenarios.

// spread runs f total times on workers goroutines (see testenv.Spread).
var spread = testenv.Spread

// churn makes total acquisitions on workers goroutines, most of them given
// up before they acquire or while they wait (see testenv.Churn).
func churn(t *testing.T, total, workers int, wait func() time.Duration, acquire func(ctx context.Context, worker int) (*Lease, error)) int {
	return testenv.Churn(t, total, workers, wait, ErrNotHeld, acquire)
}

// cancellations runs churn (total acquisitions on 24 goroutines, each
// ending after wait(), a few 50 ms later) over three Clients of e with prefix: acquire gets
// the worker's Client and all three. It checks that leases were acquired
// and, once all ended, that nothing is left: nothing held or queued, no
// subscription, no goroutine.
func cancellations(t *testing.T, e *env, prefix string, total int, wait func() time.Duration,
	acquire func(ctx context.Context, c *Client, clients []*Client) (*Lease, error)) {
	t.Helper()
	noLeak := leakCheck(t)
	clients := e.clients(t, 3, WithPrefix(prefix))
	// One attempt in 64 waits 50 ms longer, so that some acquire even on a
	// loaded machine, whose round trips can outlast every short wait.
	var attempts atomic.Int64
	waits := func() time.Duration {
		if attempts.Add(1)%64 == 0 {
			return wait() + 50*time.Millisecond
		}
		return wait()
	}
	acquired := churn(t, total, 24, waits, func(ctx context.Context, w int) (*Lease, error) {
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
var below = testenv.Below

// oneOf returns one of the forms of acquisition, picked at random.
func oneOf(forms ...func(context.Context) (*Lease, error)) func(context.Context) (*Lease, error) {
	return testenv.OneOf(forms...)
}

// waited makes an Acquire a form like Lock: it waits for the Lease until
// ctx ends.
func waited(acquire func(context.Context) <-chan *Lease) func(context.Context) (*Lease, error) {
	return testenv.Waited(acquire)
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
