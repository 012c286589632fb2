package redisync

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// latchOpen reports whether ch is closed.
func latchOpen(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestLatchBasics(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		l := e.client(t).Latch(t.Name())
		require.Equal(t, t.Name(), l.Name())
		require.Equal(t, slotHash(l.key), slotHash(l.channel))

		// Never set: open.
		n, err := l.Count(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		require.NoError(t, l.Wait(ctx))
		select {
		case <-l.Done(ctx):
		case <-time.After(10 * time.Second):
			t.Fatal("Done of an open latch not closed")
		}
		n, err = l.CountDown(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "counting down an open latch")
		ok, err := l.TrySetCount(ctx, 0)
		require.NoError(t, err)
		require.True(t, ok, "a count of 0 on an open latch")
		require.Empty(t, e.keys(t, l.key))

		ok, err = l.TrySetCount(ctx, 2)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = l.TrySetCount(ctx, 5)
		require.NoError(t, err)
		require.False(t, ok, "TrySetCount on a closed latch")
		n, err = l.Count(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		require.ErrorIs(t, l.Wait(short), context.DeadlineExceeded)
		cancel()

		done := l.Done(ctx)
		n, err = l.CountDown(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		time.Sleep(20 * time.Millisecond)
		require.False(t, latchOpen(done))
		n, err = l.CountDown(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Done not closed when the latch opened")
		}
		require.NoError(t, l.Wait(ctx))
		require.Empty(t, e.keys(t, l.key), "an open latch has no key")

		// Reusable.
		ok, err = l.TrySetCount(ctx, 1)
		require.NoError(t, err)
		require.True(t, ok)
		w := make(chan error, 1)
		go func() { w <- l.Wait(ctx) }()
		prev, err := l.Reset(ctx, 3)
		require.NoError(t, err)
		require.Equal(t, 1, prev)
		time.Sleep(20 * time.Millisecond)
		select {
		case err := <-w:
			t.Fatalf("Wait returned on a change of count: %v", err)
		default:
		}
		prev, err = l.Reset(ctx, 0)
		require.NoError(t, err)
		require.Equal(t, 3, prev)
		select {
		case err := <-w:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Reset(0) did not open the latch")
		}
		require.Empty(t, e.keys(t, l.key))
		e.requireNoSubscriptions(t)
	})
}

func TestLatchManyWaitersAcrossClients(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const clients, perClient, count = 3, 30, 3
		ctx := withTimeout(t, time.Minute)
		setter := e.client(t).Latch(t.Name())
		ok, err := setter.TrySetCount(ctx, count)
		require.NoError(t, err)
		require.True(t, ok)
		cs := e.clients(t, clients)
		var wg sync.WaitGroup
		errs := make(chan error, clients*perClient)
		for _, c := range cs {
			l := c.Latch(t.Name())
			for i := range perClient {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if i%2 == 0 {
						errs <- l.Wait(ctx)
						return
					}
					select {
					case <-l.Done(ctx):
						errs <- nil
					case <-ctx.Done():
						errs <- ctx.Err()
					}
				}()
			}
		}
		// Every waiter of a Client shares one subscription.
		eventually(t, 10*time.Second, func() bool {
			for _, c := range cs {
				if !subscribed(c, setter.channel, perClient) {
					return false
				}
			}
			return true
		}, "waiters did not subscribe")
		require.Equal(t, []string{setter.channel}, e.channels(t))
		for i := range count - 1 {
			n, err := setter.CountDown(ctx)
			require.NoError(t, err)
			require.Equal(t, count-1-i, n)
		}
		time.Sleep(50 * time.Millisecond)
		require.Len(t, errs, 0, "waiters returned while the latch was closed")
		before := scriptCalls(t, e)
		start := time.Now()
		n, err := setter.CountDown(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		wg.Wait()
		t.Logf("%d waiters on %d Clients released in %v", clients*perClient, clients, time.Since(start))
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		// One look per waiter after the message, and the count-down.
		require.LessOrEqual(t, scriptCalls(t, e)-before, int64(1+clients*perClient))
		require.Empty(t, e.keys(t, setter.key))
		e.requireNoSubscriptions(t)
	})
}

// A waiter returns when the latch it waits for opens, even if the latch is
// set again before the waiter looks.
func TestLatchWaiterSeesOpeningThatWasReset(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		l := e.client(t).Latch(t.Name())
		_, err := l.TrySetCount(ctx, 1)
		require.NoError(t, err)
		w := make(chan error, 1)
		go func() { w <- e.client(t).Latch(t.Name()).Wait(ctx) }()
		e.awaitChannels(t, 1, 10*time.Second, "the waiter did not subscribe")
		time.Sleep(20 * time.Millisecond) // its look after subscribing
		// Open and close again in one transaction: the waiter can only see
		// the latch closed, with a new generation.
		rc := e.rueidisClient(t)
		res := rc.DoMulti(ctx,
			rc.B().Multi().Build(),
			rc.B().Eval().Script(latchDownScript.src).Numkeys(1).Key(l.key).Arg(l.channel).Build(),
			rc.B().Eval().Script(latchSetScript.src).Numkeys(1).Key(l.key).Arg("nx", "1", l.channel).Build(),
			rc.B().Exec().Build())
		for _, r := range res {
			require.NoError(t, r.Error())
		}
		select {
		case err := <-w:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter missed the opening")
		}
		n, err := l.Count(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, err = l.Reset(ctx, 0)
		require.NoError(t, err)
	})
}

// latchCalls calls the methods of l that ask Redis, Done aside, Reset with
// count n, and returns their errors.
func latchCalls(ctx context.Context, l *Latch, n int) []error {
	return []error{
		errOf(l.TrySetCount(ctx, 1)),
		errOf(l.Reset(ctx, n)),
		errOf(l.CountDown(ctx)),
		errOf(l.Count(ctx)),
		l.Wait(ctx),
	}
}

func TestLatchBadInput(t *testing.T) {
	e := standaloneEnv(t)
	ctx := context.Background()
	c := e.client(t)
	var nilCtx context.Context
	var nilLatch *Latch
	for what, bad := range map[string]*Latch{
		"empty name":  c.Latch(""),
		"nil client":  (*Client)(nil).Latch("x"),
		"nil latch":   nilLatch,
		"zero latch":  {},
		"nil context": c.Latch("x"),
	} {
		t.Run(what, func(t *testing.T) {
			ctx := ctx
			if what == "nil context" {
				ctx = nilCtx
			}
			notPanics(t, what, func() {
				requireAllIs(t, ErrInvalidArgument, latchCalls(ctx, bad, 1)...)
				d := bad.Done(ctx)
				time.Sleep(10 * time.Millisecond)
				require.False(t, latchOpen(d), "Done closed on bad input")
			})
		})
	}
	require.Equal(t, "", nilLatch.Name())
	l := c.Latch(t.Name())
	for _, n := range []int{-1, maxPermits + 1} {
		_, err := l.TrySetCount(ctx, n)
		require.ErrorIs(t, err, ErrInvalidArgument, "TrySetCount(%d)", n)
		_, err = l.Reset(ctx, n)
		require.ErrorIs(t, err, ErrInvalidArgument, "Reset(%d)", n)
	}
	require.Empty(t, e.keys(t, l.key))

	// Keys that hold something else: reported, and left alone.
	rc := e.rueidisClient(t)
	eachForeignValue(t, rc, func(t *testing.T, kind string, plant func(key string)) {
		bad := c.Latch("latch-wrongtype-" + kind)
		plant(bad.key)
		requireAllIs(t, ErrWrongType, latchCalls(ctx, bad, 0)...)
		n, err := rc.Do(ctx, rc.B().Exists().Key(bad.key).Build()).AsInt64()
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "the planted value was removed")
	})
}

// Done's goroutine ends with its context and with the Client; Wait
// returns ErrClosed.
func TestLatchDoneEnds(t *testing.T) {
	e := standaloneEnv(t)
	ctx := context.Background()
	l := e.client(t).Latch(t.Name())
	_, err := l.TrySetCount(ctx, 1)
	require.NoError(t, err)
	defer l.Reset(ctx, 0)
	dctx, cancel := context.WithCancel(ctx)
	d := l.Done(dctx)
	e.awaitChannels(t, 1, 10*time.Second, "Done did not subscribe")
	cancel()
	e.awaitChannels(t, 0, 10*time.Second, "Done's watch outlived its context")
	require.False(t, latchOpen(d))

	other := e.client(t)
	d = other.Latch(t.Name()).Done(ctx)
	w := make(chan error, 1)
	go func() { w <- other.Latch(t.Name()).Wait(ctx) }()
	e.awaitChannels(t, 1, 10*time.Second, "Done did not subscribe")
	require.NoError(t, other.Close()) // waits for Done's goroutine
	select {
	case err := <-w:
		require.ErrorIs(t, err, ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not end with its Client")
	}
	require.False(t, latchOpen(d))
	require.ErrorIs(t, other.Latch(t.Name()).Wait(ctx), ErrClosed)
	e.requireNoSubscriptions(t)
}
