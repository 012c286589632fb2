package testenv

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

// What the tests expect of leases and of the channels Acquire returns,
// for any lease type L (*redisync.Lease): these helpers need only its Err
// and Unlock.

// Lease is what the helpers need of a lease.
type Lease interface {
	Err() error
	Unlock(ctx context.Context) error
}

// MustLock takes a lease with lock (a handle's Lock, TryLock, RLock or
// TryRLock) and fails the test if it cannot.
func MustLock[L any](t testing.TB, ctx context.Context, lock func(context.Context) (L, error)) L {
	t.Helper()
	l, err := lock(ctx)
	require.NoError(t, err)
	return l
}

// Recv waits for the Lease an Acquire delivers, at most within, and
// requires it to hold.
func Recv[L Lease](t testing.TB, ch <-chan L, within time.Duration, what string) L {
	t.Helper()
	select {
	case l := <-ch:
		require.NotNil(t, l)
		require.NoError(t, l.Err(), what)
		return l
	case <-time.After(within):
		t.Fatalf("%s: nothing within %v", what, within)
		var zero L
		return zero
	}
}

// Delivered waits for the one Lease an Acquire delivers, failed or not,
// and checks that the channel is closed after it.
func Delivered[L any](t testing.TB, ch <-chan L) L {
	t.Helper()
	select {
	case l, ok := <-ch:
		require.True(t, ok, "Acquire closed its channel without a Lease")
		require.NotNil(t, l, "Acquire delivered a nil Lease")
		_, ok = <-ch
		require.False(t, ok, "Acquire delivered more than one Lease")
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire delivered nothing")
		var zero L
		return zero
	}
}

// Spread runs f total times on workers goroutines: f gets the worker's
// number and the call's (0 to total-1, in the order the calls start).
func Spread(total, workers int, f func(worker, call int)) {
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

// Churn makes total acquisitions on workers goroutines, most of them given
// up before they acquire or while they wait: acquire gets the worker's
// number and a context that ends after wait(). A lease acquired is held
// for a moment and unlocked; an Unlock that finds it lost (notHeld) is no
// failure. It returns how many leases were acquired.
func Churn[L Lease](t *testing.T, total, workers int, wait func() time.Duration, notHeld error, acquire func(ctx context.Context, worker int) (L, error)) int {
	var acquired atomic.Int64
	Spread(total, workers, func(w, _ int) {
		ctx, cancel := context.WithTimeout(context.Background(), wait())
		defer cancel()
		l, err := acquire(ctx, w)
		if err != nil {
			return
		}
		acquired.Add(1)
		time.Sleep(rand.N(200 * time.Microsecond))
		if err := l.Unlock(context.Background()); err != nil && !errors.Is(err, notHeld) {
			t.Error(err)
		}
	})
	return int(acquired.Load())
}

// Below returns random durations below d.
func Below(d time.Duration) func() time.Duration {
	return func() time.Duration { return rand.N(d) }
}

// OneOf returns one of the forms of acquisition, picked at random.
func OneOf[L any](forms ...func(context.Context) (L, error)) func(context.Context) (L, error) {
	return forms[rand.IntN(len(forms))]
}

// Waited makes an Acquire a form like Lock: it waits for the Lease until
// ctx ends.
func Waited[L Lease](acquire func(context.Context) <-chan L) func(context.Context) (L, error) {
	return func(ctx context.Context) (L, error) {
		select {
		case l := <-acquire(ctx):
			return l, l.Err()
		case <-ctx.Done():
			var zero L
			return zero, ctx.Err()
		}
	}
}
