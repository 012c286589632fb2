package redisson

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/internal/engine"

	"github.com/redis/rueidis"
)

// Redisson's count-down latch (RCountDownLatch):
//
//	string NAME: the count; no key is a count of zero
//	channel redisson_countdownlatch__channel__{NAME} (braces whatever NAME
//	        holds), messages "0" (the count reached zero) and "1" (a new
//	        count was set, or the latch deleted)

// CountDownLatch is a count-down latch in the layout of Redisson's
// RCountDownLatch (redisson.getCountDownLatch(NAME) in Java): Wait returns
// once the count is zero, as Java's await. It is a cheap handle: make one
// per use or share one, from many goroutines.
//
// It holds nothing, so there is no Lease: a latch is not lost, and a
// process that dies before its CountDown leaves the count where it was,
// as in Redisson. Compared with Latch: the count is not bound to a
// lifetime (Redisson's key never expires), and a latch that was never
// set, or was deleted, reads as open (count zero), as Java's getCount.
//
// On Cluster NAME must not contain '{': Java puts the channel in the slot
// of {NAME} and the key in the slot of NAME's own hash tag, which then
// differ (redisync.ErrInvalidArgument).
type CountDownLatch struct {
	c    *Client
	name string
	cfg  config
	err  error
}

// CountDownLatch returns the Redisson RCountDownLatch of the given
// name. An invalid name or option is reported by every method, as
// redisync.ErrInvalidArgument.
func (c *Client) CountDownLatch(name string, opts ...Option) *CountDownLatch {
	l := &CountDownLatch{c: c, name: name}
	l.cfg, l.err = newConfig(c, name, opts)
	if l.err == nil && c.cluster && strings.Contains(name, "{") {
		l.err = fmt.Errorf("%w: Redisson count-down latch %q contains '{': its key and channel would be in different Cluster slots", redisync.ErrInvalidArgument, name)
	}
	return l
}

// Name returns the latch's name.
func (l *CountDownLatch) Name() string {
	if l == nil {
		return ""
	}
	return l.name
}

func (l *CountDownLatch) channel() string {
	return "redisson_countdownlatch__channel__{" + l.name + "}"
}

func (l *CountDownLatch) check(ctx context.Context) error {
	if l == nil {
		return fmt.Errorf("%w: nil CountDownLatch", redisync.ErrInvalidArgument)
	}
	return checkHandle("CountDownLatch", l.c, l.err, ctx)
}

func (l *CountDownLatch) object() (*Client, PubSub, string) { return l.c, l.cfg.pubsub, l.name }

// TrySetCount sets the count when the latch has none (its key does not
// exist), as Java's trySetCount, and reports whether it did. count must
// be at least 1. redisync.ErrWrongType when NAME holds something else than a
// number; an error from Redis or the connection, or ctx's end, is
// returned as it comes.
func (l *CountDownLatch) TrySetCount(ctx context.Context, count int64) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, err
	}
	if count < 1 {
		return false, fmt.Errorf("%w: count %d: at least 1", redisync.ErrInvalidArgument, count)
	}
	return found(runOn(ctx, l, redissonLatchSetScript, "set Redisson count-down latch", func(how string) ([]string, []string) {
		return []string{l.name, l.channel()}, []string{strconv.FormatInt(count, 10), how}
	}))
}

// CountDown counts the latch down by one and returns the count after; at
// zero the key goes and the waiters, Java's and Go's, are woken. A latch
// at zero stays there. Errors as TrySetCount. A CountDown whose reply was
// lost may or may not have counted: retrying it may count twice.
func (l *CountDownLatch) CountDown(ctx context.Context) (int64, error) {
	return runOn(ctx, l, redissonLatchDownScript, "count down Redisson count-down latch", l.keysAndHow)
}

// keysAndHow are the keys and arguments of a script that takes the latch
// and how to publish.
func (l *CountDownLatch) keysAndHow(how string) ([]string, []string) {
	return []string{l.name, l.channel()}, []string{how}
}

// Count returns the count (0 when the latch has none). Errors as
// TrySetCount.
func (l *CountDownLatch) Count(ctx context.Context) (int64, error) {
	if err := l.check(ctx); err != nil {
		return 0, err
	}
	_, n, err := redissonCount(ctx, l.c.rc, l.name, "count-down latch")
	return n, err
}

// Wait returns nil once the count is zero: at once when it is, else on
// Redisson's message, or when the Client's presence pass (a second apart
// by default) finds the count changed or gone, whatever messages were
// lost. It returns, when ctx ends first, an error naming the latch that
// matches ctx.Err() (and not redisync.ErrLocked: nobody holds a latch),
// redisync.ErrClosed when the
// Client is closed, and redisync.ErrWrongType at once when NAME holds something
// else. Connection errors are retried with backoff until ctx ends.
func (l *CountDownLatch) Wait(ctx context.Context) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	// Through the Client's form of Lock: the call's grace, Close.
	_, err := lockHandle(ctx, latchWait{l}, false)
	return err
}

// latchWait is a latch's Wait as a handle: it acquires nothing.
type latchWait struct{ l *CountDownLatch }

func (w latchWait) check(ctx context.Context) error { return w.l.check(ctx) }

func (w latchWait) client() *Client { return w.l.c }

// acquire is Wait, once its input is checked: nil once the latch is open,
// or an error.
func (w latchWait) acquire(ctx context.Context, _ bool) (*redisync.Lease, error) {
	l := w.l
	_, classic, sharded, err := l.c.redissonPubSub(ctx, l.cfg.pubsub, l.name)
	if err != nil {
		return nil, err
	}
	_, err = l.c.wait(ctx, engine.Wait{
		Channel: l.channel(), Classic: classic, Sharded: sharded,
		Probe: redissonCountProbe(l.name), Primitive: "redisson_countdownlatch", Name: l.name,
		Attempt: func(ctx context.Context) (any, time.Duration, error) {
			// A read: nothing to undo.
			res, _, err := l.c.run(ctx, nil, redissonCountGetScript, []string{l.name}, []string{"count-down latch"}, nil)
			_, n, _, err := redissonCountReply(l.name, "count-down latch", res, err)
			switch {
			case err != nil:
				return nil, 0, err
			case n <= 0:
				return latchOpen{}, 0, nil
			}
			return nil, -1, nil
		},
	}, false)
	return nil, err
}

// latchOpen is what an attempt of Wait gets when the latch is open.
type latchOpen struct{}

// redissonCountProbe reads the count of the Redisson count-down latch
// name, none once it is open: what the presence pass reads for its
// waiters (see subscription.follow).
func redissonCountProbe(name string) probe {
	return func(rc rueidis.Client) rueidis.Completed { return rc.B().Get().Key(name).Build() }
}

// Delete deletes the latch, as Java's delete, and reports whether it
// existed; its waiters then find it open. Errors as TrySetCount.
func (l *CountDownLatch) Delete(ctx context.Context) (bool, error) {
	return found(runOn(ctx, l, redissonLatchDeleteScript, "delete Redisson count-down latch", l.keysAndHow))
}

// CountDownLatchState is a snapshot of a count-down latch in
// Redisson's RCountDownLatch layout.
type CountDownLatchState struct {
	// Count is the count: 0 (open) when NAME does not exist.
	Count int64
	// TTL is NAME's remaining time to live; negative when it has no
	// expiry or does not exist.
	TTL time.Duration
}

// InspectCountDownLatch reads the Redisson count-down latch
// (RCountDownLatch) of the given name through rc, changing nothing: what
// `redisync inspect --redisson latch` shows. Its string NAME cannot be
// told from an RSemaphore's or any counter's: it is read as a latch
// because the caller says it is one. A key that is not a string holding an
// integer is redisync.ErrWrongType.
func InspectCountDownLatch(ctx context.Context, rc rueidis.Client, name string) (CountDownLatchState, error) {
	if rc == nil || ctx == nil || name == "" {
		return CountDownLatchState{}, fmt.Errorf("%w: nil client or context, or empty name", redisync.ErrInvalidArgument)
	}
	_, n, ttl, err := redissonCountTTL(ctx, rc, name, "count-down latch")
	return CountDownLatchState{Count: n, TTL: ttl}, err
}
