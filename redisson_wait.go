package redisync

import (
	"context"
	"time"
)

// The waiting of the Redisson locks, on Redisson's own channels and
// messages, through the Client's notifier as the library's own locks wait:
// one subscription per channel and kind of pub/sub for all the Client's
// waiters, whose every message wakes them all, by generation (notify.go).
// Messages are for latency, never for liveness: the Client's presence pass
// reads, once per pass, what each channel's waiters wait for (the probe of
// their primitive: a holder of the lock, a read-write lock's mode, the
// permits, the count), and wakes them when it reads free or changed; a
// waiter also looks again when the holder's lease runs out, as its attempt
// found it. Whatever messages are lost (a publisher on the other kind of
// pub/sub, a broken connection, a holder that died and published nothing),
// a waiter looks again within one pass.

// redissonWait is one acquisition of a Redisson primitive.
type redissonWait struct {
	c       *Client
	channel string
	// classic and sharded tell which kinds of pub/sub to listen on.
	classic, sharded bool
	// attempt runs the acquire script once: the Lease, or how long the
	// thing stays taken at most (zero or negative: unknown).
	attempt func(ctx context.Context) (*Lease, time.Duration, error)
	// undo releases what an attempt whose outcome is unknown may have
	// taken; it gets a detached context.
	undo func(ctx context.Context)
	// busy is TryLock's error when the thing is taken.
	busy error
	// probe is what the Client's presence pass reads for the waiters of
	// channel (see subscription.follow): they look again within one pass
	// whatever messages were lost.
	probe probe
	// primitive and name label, in metrics and logs, a wait that the
	// fallback timer ended.
	primitive, name string
}

// run attempts, and unless try, waits for a message, the presence pass or
// the end of the holder's lease between attempts, until it acquires or ctx
// ends. Connection errors are retried with backoff; Redis errors are
// returned at once.
func (w *redissonWait) run(ctx context.Context, try bool) (*Lease, error) {
	var subs waitSet
	defer subs.leave()
	// Joined before the first attempt when messages flow on the channel
	// already (other waiters of the Client): the attempt's failure is then
	// waited out at once, without a second attempt once subscribed.
	joined := !try && w.joinLive(&subs)
	clients := []*Client{w.c}
	retry := errorBackoff()
	var lastErr error
	backoff := func(err error) error {
		lastErr = err
		if err := w.sleep(ctx, retry.next()); err != nil {
			return ctxErr(ctx, lastErr)
		}
		return nil
	}
	fellBack := false // the last wait was ended by the fallback timer
	for {
		subs.mark()
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
		retry.reset()
		if l != nil {
			if ctx.Err() != nil {
				l.abandon(ctx.Err())
				return nil, ctx.Err()
			}
			if fellBack {
				w.c.fellBack(w.primitive, w.name, w.name)
			}
			return l, nil
		}
		if try {
			return nil, w.busy
		}
		if !joined {
			// The first wait waits for the subscriptions to take effect: a
			// release published before was missed, so the next attempt
			// comes then.
			if err := w.join(ctx, &subs); err != nil {
				if ctx.Err() != nil {
					return nil, ctxErr(ctx, lastErr)
				}
				return nil, err
			}
			joined = true
		}
		d, fallback := w.timer(wait)
		timedOut, err := subs.wait(ctx, clients, d)
		if err != nil {
			return nil, err
		}
		fellBack = timedOut && fallback
	}
}

// kinds are the kinds of pub/sub the waiter listens on: classic first.
func (w *redissonWait) kinds() []pubsubKind {
	var kinds []pubsubKind
	if w.classic || !w.sharded {
		kinds = append(kinds, classicPubSub)
	}
	if w.sharded {
		kinds = append(kinds, shardedPubSub)
	}
	return kinds
}

// joinLive adds to subs the Client's subscriptions of the channel that are
// in effect, and reports whether it has all it listens on. Their waiters
// are then followed already.
func (w *redissonWait) joinLive(subs *waitSet) bool {
	all := true
	for _, k := range w.kinds() {
		all = subs.joinLive(w.c, w.channel, k) && all
	}
	if all {
		w.follow(subs)
	}
	return all
}

// join adds to subs the Client's subscriptions of the channel, subscribing
// where need be, and has the presence pass read the probe for them.
func (w *redissonWait) join(ctx context.Context, subs *waitSet) error {
	for _, k := range w.kinds() {
		if err := subs.join(ctx, w.c, w.channel, k, nil); err != nil {
			return err
		}
	}
	w.follow(subs)
	return nil
}

// follow has the presence pass read the probe for the waiters of the
// channel, once per pass: through the first subscription (both kinds'
// waiters wait on it).
func (w *redissonWait) follow(subs *waitSet) {
	if len(subs.subs) > 0 {
		subs.subs[0].follow(w.probe)
	}
}

// timer returns how long a wait lasts without a message or a presence
// pass: until the holder's lease runs out, when the attempt knew when, and
// the fallback otherwise (fallback true), which only a lost wake-up lets
// end a wait that the next attempt ends in success.
func (w *redissonWait) timer(wait time.Duration) (d time.Duration, fallback bool) {
	if wait > 0 && wait < waiterFallback {
		// A millisecond more: the lease has run out on the server then.
		return wait + time.Millisecond, false
	}
	return waiterFallback, true
}

// sleep waits d: ctx's error when ctx ends first, ErrClosed when the
// Client closes.
func (w *redissonWait) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	case <-w.c.closed:
		return ErrClosed
	}
	return nil
}

// abandon runs undo with a detached context (see Client.cleanup).
func (w *redissonWait) abandon(ctx context.Context) {
	if w.undo == nil {
		return
	}
	w.c.cleanup(ctx, w.undo)
}
