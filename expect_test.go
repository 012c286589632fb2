package redisync

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync/internal/testenv"
)

// What the tests expect of leases and of the channels Acquire returns.

// mustLock takes a lease with lock (a handle's Lock, TryLock, RLock or
// TryRLock) and fails the test if it cannot.
func mustLock(t testing.TB, ctx context.Context, lock func(context.Context) (*Lease, error)) *Lease {
	t.Helper()
	return testenv.MustLock(t, ctx, lock)
}

// recv waits for the Lease an Acquire delivers, at most within, and
// requires it to hold.
func recv(t testing.TB, ch <-chan *Lease, within time.Duration, what string) *Lease {
	t.Helper()
	return testenv.Recv(t, ch, within, what)
}

// delivered waits for the one Lease an Acquire delivers, failed or not,
// and checks that the channel is closed after it.
func delivered(t testing.TB, ch <-chan *Lease) *Lease {
	t.Helper()
	return testenv.Delivered(t, ch)
}

// pending reports whether an Acquire channel has delivered nothing yet.
func pending(ch <-chan *Lease) bool {
	return len(ch) == 0
}

// requireLost waits for l to be lost, at most within, and checks that the
// reason (Err, the cause of Context) is one of reasons.
func requireLost(t testing.TB, l *Lease, within time.Duration, reasons ...error) {
	t.Helper()
	select {
	case <-l.Lost():
	case <-time.After(within):
		t.Fatalf("lease %s not lost within %v", l.Name(), within)
	}
	for _, err := range []error{l.Err(), context.Cause(l.Context())} {
		require.True(t, errorsIsAny(err, reasons...), "reason %v, not one of %v", err, reasons)
	}
}

// errorsIsAny reports whether err is one of targets.
func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// nested acquires with lock n times, each time with the context of the
// lease before, runs inside while all are held, and unlocks them in turn.
func nested(ctx context.Context, lock func(context.Context) (*Lease, error), n int, inside func()) error {
	l, err := lock(ctx)
	if err != nil {
		return err
	}
	defer l.Unlock(context.Background())
	if n > 1 {
		return nested(l.Context(), lock, n-1, inside)
	}
	inside()
	return nil
}

// unlockAll receives the Lease from every channel concurrently, each within
// d, and unlocks it; a failed acquisition or a timeout fails the test.
func unlockAll(t testing.TB, ctx context.Context, chans []<-chan *Lease, d time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	for i, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case l := <-ch:
				if err := l.Err(); err != nil {
					t.Errorf("waiter %d: %v", i, err)
					return
				}
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("waiter %d: %v", i, err)
				}
			case <-time.After(d):
				t.Errorf("waiter %d did not acquire within %v", i, d)
			}
		}()
	}
	wg.Wait()
}

// errOf is the error of a call that returns a value and an error.
func errOf[T any](_ T, err error) error { return err }

// requireAllIs requires each of errs, the errors of a series of calls, to
// be want.
func requireAllIs(t testing.TB, want error, errs ...error) {
	t.Helper()
	for i, err := range errs {
		require.ErrorIs(t, err, want, "call %d of %d", i+1, len(errs))
	}
}

// requireLaterToken takes the lock with lock, requires a greater fencing
// token than prev's, and releases it.
func requireLaterToken(t testing.TB, ctx context.Context, lock func(context.Context) (*Lease, error), prev *Lease) {
	t.Helper()
	l, err := lock(ctx)
	require.NoError(t, err)
	require.Greater(t, l.Token(), prev.Token())
	require.NoError(t, l.Unlock(ctx))
}
