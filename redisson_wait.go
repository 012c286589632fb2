package redisync

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

// The waiting of the Redisson locks: on Redisson's own channels and
// messages, with one subscription (a dedicated rueidis connection) per
// waiting acquisition, and a re-check at least every redissonPoll so that
// a message lost (a publisher on the other kind of pub/sub, a broken
// connection, a holder that died) never stalls a waiter longer than that.

// redissonPoll bounds how long a Redisson waiter sleeps without a message
// before it attempts again.
const redissonPoll = time.Second

// redissonWait is one acquisition of a Redisson primitive.
type redissonWait struct {
	c       *Client
	channel string
	// classic and sharded tell which subscriptions to listen on.
	classic, sharded bool
	// attempt runs the acquire script once: the Lease, or how long the
	// thing stays taken at most (negative: unknown).
	attempt func(ctx context.Context) (*Lease, time.Duration, error)
	// undo releases what an attempt whose outcome is unknown may have
	// taken; it gets a detached context.
	undo func(ctx context.Context)
	// busy is TryLock's error when the thing is taken.
	busy error
}

// run attempts, and unless try, waits for a message or the poll between
// attempts until it acquires or ctx ends. Connection errors are retried
// with backoff; Redis errors are returned at once.
func (w *redissonWait) run(ctx context.Context, try bool) (*Lease, error) {
	var sub *redissonSub
	defer func() {
		if sub != nil {
			sub.close()
		}
	}()
	retry := errorBackoff()
	var lastErr error
	backoff := func(err error) error {
		lastErr = err
		if err := w.sleep(ctx, nil, retry.next()); err != nil {
			return ctxErr(ctx, lastErr)
		}
		return nil
	}
	for {
		l, wait, err := w.attempt(ctx)
		if err != nil {
			if ctx.Err() != nil {
				w.abandon(ctx)
				return nil, ctxErr(ctx, lastErr)
			}
			if try || !transient(err) {
				return nil, err
			}
			if err := backoff(err); err != nil {
				w.abandon(ctx)
				return nil, err
			}
			continue
		}
		if l != nil {
			if ctx.Err() != nil {
				l.abandon(ctx.Err())
				return nil, ctx.Err()
			}
			return l, nil
		}
		if try {
			return nil, w.busy
		}
		if sub == nil || sub.broken() {
			if sub != nil {
				sub.close()
			}
			if sub, err = w.c.redissonSubscribe(ctx, w.channel, w.classic, w.sharded); err != nil {
				switch {
				case ctx.Err() != nil:
					return nil, ctxErr(ctx, lastErr)
				case !transient(err):
					return nil, err
				}
				if err := backoff(err); err != nil {
					return nil, err
				}
				continue
			}
			// Attempt again at once: a release published before the
			// subscription took effect was missed.
			continue
		}
		retry.reset()
		if wait <= 0 || wait > redissonPoll {
			wait = redissonPoll
		}
		if err := w.sleep(ctx, sub.wake, wait); err != nil {
			return nil, err
		}
	}
}

// sleep waits for wake, at most d: ctx's error when ctx ends first,
// ErrClosed when the Client closes.
func (w *redissonWait) sleep(ctx context.Context, wake <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wake:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	case <-w.c.closed:
		return ErrClosed
	}
	return nil
}

// abandon runs undo with a detached context.
func (w *redissonWait) abandon(ctx context.Context) {
	if w.undo == nil {
		return
	}
	dctx, cancel := detached(ctx)
	defer cancel()
	w.undo(dctx)
}

// redissonSub is the subscription of one waiting acquisition to one
// channel: classic, sharded, or both, on a dedicated connection.
type redissonSub struct {
	dc     rueidis.DedicatedClient
	cancel func()
	wake   chan struct{}
	errs   <-chan error
}

// redissonSubscribe subscribes to channel and returns once the server
// confirmed every subscription. On Cluster the connection goes to the
// master of the channel's slot (sharded pub/sub requires it; classic
// messages reach every node).
func (c *Client) redissonSubscribe(ctx context.Context, channel string, classic, sharded bool) (*redissonSub, error) {
	dc, cancel := c.rc.Dedicate()
	s := &redissonSub{dc: dc, cancel: cancel, wake: make(chan struct{}, 1)}
	s.errs = dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(rueidis.PubSubMessage) {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}})
	var cmds rueidis.Commands
	if sharded {
		cmds = append(cmds, dc.B().Ssubscribe().Channel(channel).Build())
	}
	if classic {
		cmds = append(cmds, dc.B().Subscribe().Channel(channel).Build())
	}
	for _, r := range dc.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			s.close()
			return nil, redisErr("subscribe "+channel, err)
		}
	}
	return s, nil
}

// broken reports whether the subscription's connection ended.
func (s *redissonSub) broken() bool {
	select {
	case <-s.errs:
		return true
	default:
		return false
	}
}

// close drops the subscription with its connection.
func (s *redissonSub) close() {
	s.dc.Close()
	s.cancel()
}
