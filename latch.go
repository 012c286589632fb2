package redisync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// latchRecheck is how long a latch waiter waits for a message before it
// looks at the count again. Messages are not expected to be lost (a broken
// subscription makes every waiter look again when it is restored); this
// only bounds the cost of one that was, and a waiter that finds the latch
// opened when it ends reports the lost wake-up (Metrics.WaitFallback).
const latchRecheck = 15 * time.Second

// errLatchOpen marks, inside Wait, an attempt that found the latch open.
var errLatchOpen = errors.New("redisync: latch open")

// Latch is a distributed count-down latch: waiters block until the count
// reaches zero. It is a cheap handle, safe for concurrent use.
//
// A latch is open when its count is zero: it was never set, it was counted
// down to zero, or it was reset to zero. An open latch has no key in Redis,
// so a latch that opened leaves nothing behind; a closed latch keeps its
// count, without expiry, until it opens. A latch is reusable: set a new
// count once it opened. A Redis server without persistence that restarts
// forgets closed latches: they open.
//
// Waiting costs one round trip when the latch is open. Otherwise the
// waiter subscribes to the latch's channel, shared by every waiter of the
// Client; the count-down that opens the latch publishes one message, which
// wakes every local waiter that read the latch before it, whenever it
// starts waiting (see notifier). A waiter returns once the latch it waited
// for opened, even if the latch was set again before it looked.
//
// In Metrics, a Wait that returns nil counts as an acquisition of the
// primitive "latch", with the time it waited; it has no release.
//
// Redis layout, for a name with hash tag T (see Mutex): prefix:latch:T, a
// hash of the count and of the generation (the server time at which it was
// set while open), and the channel prefix:latchch:T.
type Latch struct {
	c       *Client
	name    string
	key     string
	channel string
	err     error // invalid name
}

// Latch returns the latch with the given name. Names are as for Mutex; a
// Latch and a Mutex or Semaphore of the same name are unrelated. An
// invalid name is reported by every method, as ErrInvalidArgument.
func (c *Client) Latch(name string) *Latch {
	l := &Latch{c: c, name: name}
	l.err = validName(name)
	if err := c.invalid(); err != nil {
		l.err = err
	}
	if l.err == nil {
		l.key, l.channel = c.key("latch", name), c.key("latchch", name)
	}
	return l
}

func (l *Latch) checkCount(ctx context.Context, count int) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	return countIn(count, 0, "latch count %d: it must be between 0 and 2^48")
}

// TrySetCount closes the latch with count if it is open, and reports
// whether the latch now has that count: true when it was open (for a count
// of 0, the latch just stays open), false when it was closed, with its
// count unchanged. count must be between 0 and 2^48 (ErrInvalidArgument).
// Errors are from Redis or ctx; a key holding something else gives
// ErrWrongType.
func (l *Latch) TrySetCount(ctx context.Context, count int) (bool, error) {
	if err := l.checkCount(ctx, count); err != nil {
		return false, err
	}
	ok, _, err := l.set(ctx, "nx", count)
	return ok, err
}

// Reset sets the latch's count, whatever it was, and returns the previous
// count (0 when it was open). A count of 0 opens the latch and wakes its
// waiters; any other count closes it, or changes the count of a closed
// latch, whose waiters keep waiting. count must be between 0 and 2^48.
// Errors are as for TrySetCount.
func (l *Latch) Reset(ctx context.Context, count int) (prev int, err error) {
	if err := l.checkCount(ctx, count); err != nil {
		return 0, err
	}
	_, prev, err = l.set(ctx, "set", count)
	return prev, err
}

func (l *Latch) set(ctx context.Context, mode string, count int) (bool, int, error) {
	res, err := latchSetScript.exec(ctx, l.c.rc, []string{l.key}, []string{mode, strconv.Itoa(count), l.channel}).AsIntSlice()
	if err != nil {
		return false, 0, redisErr("latch set", err)
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("redisync: latch set: unexpected reply of %d elements", len(res))
	}
	return res[0] == 1, int(res[1]), nil
}

// CountDown decrements the latch's count and returns the count left. The
// count-down that reaches zero opens the latch and wakes every waiter, on
// every Client, with one message. Counting down an open latch does nothing
// and returns 0. Errors are from Redis or ctx (the count-down may then
// have happened or not), ErrWrongType for a key holding something else.
func (l *Latch) CountDown(ctx context.Context) (int, error) {
	if err := l.check(ctx); err != nil {
		return 0, err
	}
	n, err := latchDownScript.exec(ctx, l.c.rc, []string{l.key}, []string{l.channel}).AsInt64()
	if err != nil {
		return 0, redisErr("latch count down", err)
	}
	return int(n), nil
}

// Count returns the latch's count: 0 when it is open. Errors are as for
// CountDown.
func (l *Latch) Count(ctx context.Context) (int, error) {
	if err := l.check(ctx); err != nil {
		return 0, err
	}
	n, _, err := l.get(ctx)
	return n, err
}

// latchRead is what get reads.
type latchRead struct {
	n   int
	gen string
}

// get reads the count and the generation.
func (l *Latch) get(ctx context.Context) (int, string, error) {
	res, err := latchGetScript.exec(ctx, l.c.rc, []string{l.key}, nil).ToArray()
	if err != nil {
		return 0, "", redisErr("latch count", err)
	}
	if len(res) != 2 {
		return 0, "", fmt.Errorf("redisync: latch count: unexpected reply of %d elements", len(res))
	}
	n, err := res[0].AsInt64()
	if err != nil {
		return 0, "", fmt.Errorf("redisync: latch count: %w", err)
	}
	gen, err := res[1].ToString()
	if err != nil {
		return 0, "", fmt.Errorf("redisync: latch count: %w", err)
	}
	return int(n), gen, nil
}

// Wait blocks until the latch is open, and returns nil then: at once when
// it is open already. It also returns nil when the latch opened and was set
// again before Wait looked.
//
// It returns, when ctx ends first, an error naming the latch that matches
// ctx.Err() (and not ErrLocked: nobody holds a latch), and ErrClosed when
// the Client is closed. Connection errors do not end the wait: Wait retries them with
// backoff (up to a second apart) until ctx ends, then returns ctx's error
// wrapping the last of them. Errors Redis replies with (ErrWrongType) are
// returned at once.
func (l *Latch) Wait(ctx context.Context) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	ctx, g := withGrace(ctx)
	defer g.end()
	var gen string
	first := true
	open := failedLease(errLatchOpen)
	a := acquisition{
		c: l.c, primitive: "latch", name: l.name, channel: l.channel, key: l.key,
		attempt: func(ctx context.Context) (*Lease, time.Duration, error) {
			// Not cut short by ctx: a connection being dialed for this read
			// would fail for everyone waiting for it.
			r, err := callInFlight(l.c, ctx, func(actx context.Context) (latchRead, error) {
				n, g, err := l.get(actx)
				return latchRead{n, g}, err
			})
			n, g := r.n, r.gen
			if err != nil {
				return nil, 0, err
			}
			if n == 0 || (!first && g != gen) {
				return open, 0, nil
			}
			if first {
				gen, first = g, false
			}
			return nil, latchRecheck, nil
		},
		undo: func(context.Context) {},
		// The generation changes when the latch opens (no hash: none) and
		// whenever it is set again.
		probe: func(rc rueidis.Client) rueidis.Completed { return rc.B().Hget().Key(l.key).Field("g").Build() },
		// Only a message or the presence pass says that a latch opened.
		lostIfTimed: true,
	}
	_, err := a.run(ctx, false)
	return err
}

// Done returns a channel that is closed when the latch is open, for select
// statements. It waits as Wait does, on a goroutine that ends when the
// latch opens, when ctx ends or when the Client is closed; in the last two
// cases, and for bad input, the channel is never closed: select on
// ctx.Done() as well, or call Wait to learn the error. Connection errors
// are retried until then.
func (l *Latch) Done(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{})
	if l.check(ctx) != nil {
		return ch
	}
	l.c.waiters.Add(1)
	go func() {
		defer l.c.waiters.Done()
		if l.Wait(ctx) == nil {
			close(ch)
		}
	}()
	return ch
}
