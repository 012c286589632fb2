package redisync

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync/internal/engine"
)

// Locks of other layouts (package redisson) are built on the Client's
// machinery through the seam of package internal/engine, which this file
// fills: its package doc says what the seam exposes and why that is
// enough. Nothing here is exported. The Client's memory of an ownership
// (its leases, the re-entries on their way) stays on this side of the
// seam: a kind's Unlock is told only the decision it leads to, release
// every hold or one, made here, under the holder's lock, where it is used.

func init() {
	engine.H = engine.Hooks{
		Client:  engineClient,
		Acquire: engineAcquire,
		Wait: func(ctx context.Context, w engine.Wait, try bool) (any, error) {
			return (&scriptWait{w: w, c: w.C.(*Client)}).run(ctx, try)
		},
		Run:   engineRun,
		Lease: engineLease,
		Err:   redisErr,
	}
}

func init() {
	engine.T = engine.TestHooks{
		Waiters: func(v any, channel string) int {
			n := v.(*Client).notify
			n.mu.Lock()
			defer n.mu.Unlock()
			waiters := 0
			for _, kind := range []pubsubKind{classicPubSub, shardedPubSub} {
				s := n.subs[subKey{channel, kind}]
				if s == nil {
					continue
				}
				select {
				case <-s.ready:
				default:
					return 0
				}
				waiters = max(waiters, s.refs)
			}
			return waiters
		},
		StallPresence: func(v any) func() {
			c := v.(*Client)
			c.presence.stall.Lock()
			return c.presence.stall.Unlock
		},
		SubscriptionLinger: subscriptionLinger,
	}
}

// engineClient is the seam's view of a Client.
func engineClient(v any) (engine.Client, error) {
	c, _ := v.(*Client)
	if err := c.invalid(); err != nil {
		return engine.Client{}, err
	}
	return engine.Client{
		C: c, RC: c.rc, Log: c.log, Cluster: c.cluster, WatchdogLease: c.cfg.watchdogLease,
		NewOwner: c.newOwner, Cleanup: c.cleanup, Detached: detached,
		PublishedOneWay: func(name string) {
			if f := c.cfg.metrics.PublishedOneWay; f != nil {
				f(name)
			}
		},
		Check: func(what string, ctx context.Context) error { return checkHandle(what, c, nil, ctx) },
	}, nil
}

// engineAcquire runs h in one of the three forms of acquiring.
func engineAcquire(ctx context.Context, h engine.Handle, form engine.Form) (any, error) {
	switch form {
	case engine.Background:
		return acquireHandle(ctx, seamHandle(h)), nil
	case engine.Try:
		return lockHandle(ctx, seamHandle(h), true)
	}
	return lockHandle(ctx, seamHandle(h), false)
}

// seamHandle is a handle of the seam.
type seamHandle engine.Handle

func (h seamHandle) check(ctx context.Context) error { return h.Check(ctx) }

func (h seamHandle) acquire(ctx context.Context, try bool) (*Lease, error) {
	v, err := h.Acquire(ctx, try)
	l, _ := v.(*Lease)
	return l, err
}

func (h seamHandle) spans() []*Client { return []*Client{h.Client().(*Client)} }

// seamKinds are the lease kinds made of the seam's kinds.
var seamKinds sync.Map // *engine.Kind -> *leaseKind

// kindOf returns the lease kind of k, made on first use.
func kindOf(k *engine.Kind) *leaseKind {
	if lk, ok := seamKinds.Load(k); ok {
		return lk.(*leaseKind)
	}
	lk := &leaseKind{
		primitive:  k.Primitive,
		tracked:    k.Tracked,
		ownerField: k.Tracked,
		renew:      scriptOf(k.Renew),
		release:    scriptOf(k.Release),
		releaseAll: func(h *holder) rueidis.LuaExec { return k.ReleaseAll(h.view()) },
		unlock: func(ctx context.Context, h *holder, hold string) (releaseState, error) {
			return h.unlockCounted(ctx, hold, k)
		},
		ext: k,
	}
	v, _ := seamKinds.LoadOrStore(k, lk)
	return v.(*leaseKind)
}

// view is what a seam kind's functions see of h.
func (h *holder) view() engine.Holder {
	return engine.Holder{
		C: h.c, RC: h.c.rc, Name: h.name, Key: h.key, Owner: h.owner, Lease: h.lease,
		Keys: engine.Keys{Lock: h.keys.lock, Channel: h.keys.channel, Queue: h.keys.queue, Waiters: h.keys.waiters},
	}
}

// unlockCounted releases one hold of h ("" for every hold) with k's
// Unlock. For a kind whose holds Redis counts, the holder's last Lease
// releases every hold while no re-entry is on its way, so that a re-entry
// whose outcome was unknown never keeps the lock. A re-entry's hold is
// counted in Redis before its Lease is in h.leases: while one is on its
// way (entering), the last Lease releases only its own hold, and the last
// re-entry to end releases what is left (endReentry). While a release of
// every hold is on its way (wiping), no re-entry starts (beginReentry);
// one that had no answer keeps them out until a release answers
// (wipeUnsure). The other Leases are counted by their holds: the Lease
// released may have left h.leases already (one given back, see giveBack).
func (h *holder) unlockCounted(ctx context.Context, hold string, k *engine.Kind) (releaseState, error) {
	all := true
	if k.Counted {
		h.mu.Lock()
		others := 0
		for l := range h.leases {
			if l.hold != hold {
				others++
			}
		}
		all = hold == "" || (others == 0 && h.entering == 0)
		if all {
			h.wiping++
		}
		h.mu.Unlock()
	}
	st, answered, err := k.Unlock(ctx, h.view(), hold, all)
	if k.Counted && all {
		h.mu.Lock()
		h.wiping--
		// A release with no answer may still run: until one answers, no
		// re-entry starts.
		h.wipeUnsure = !answered
		h.mu.Unlock()
	}
	switch st {
	case engine.Freed:
		return freed, err
	case engine.StillHeld:
		return stillHeld, err
	}
	return notHeld, err
}

// engineGrant makes the Lease of a seam kind's grant, taken on c, a
// re-entry of parent when it is not nil.
func engineGrant(ctx context.Context, c *Client, parent *Lease, g engine.Grant) (any, error) {
	l, err := c.grant(ctx, grant{
		kind: kindOf(g.Kind), name: g.Name, key: g.Key, parent: parent, owner: g.Owner, hold: g.Hold,
		keys:  lockKeys{lock: g.Keys.Lock, channel: g.Keys.Channel, queue: g.Keys.Queue, waiters: g.Keys.Waiters},
		token: g.Token, lease: g.Lease, watchdog: g.Watchdog, sent: g.Sent, shared: g.Shared,
	})
	if l == nil {
		return nil, err
	}
	return l, err
}

// engineLease tells what the Lease v holds, or when v is nil, the live
// Lease ctx carries for the lock key of c.
func engineLease(ctx context.Context, cv any, key string, v any) (any, engine.LeaseInfo, bool) {
	l, _ := v.(*Lease)
	if v == nil && ctx != nil {
		if c, _ := cv.(*Client); c != nil {
			l = leaseFrom(ctx, c, lockKeys{lock: key})
		}
	}
	if l == nil || l.h == nil {
		return nil, engine.LeaseInfo{}, false
	}
	h := l.h
	h.mu.Lock()
	live := !h.done
	h.mu.Unlock()
	return l, engine.LeaseInfo{
		C: h.c, Kind: h.kind.ext, Name: h.name, Owner: h.owner, Lease: h.lease, Watchdog: h.watchdog, Live: live,
	}, true
}

// engineRun runs one script of a seam kind that may take something with
// execTaking (undo undoes a late reply of an acquisition that is no
// re-entry), and returns with its reply the grant that makes the Lease of
// what it took (grantOnce). A re-entry of parent is counted on the
// parent's holder while it is on its way (beginReentry): its hold is
// counted in Redis before its Lease is, and a release of every hold must
// not take it. The grant ends the count once the caller applied the
// outcome (the Lease made, or not); for a reply that comes late, it ends
// when the reply came, or never will. A re-entry the script refused ({-1,
// why}) is the parent's loss.
func engineRun(ctx context.Context, cv any, pv any, s engine.Script, keys, args []string, undo func(context.Context)) (res []rueidis.RedisMessage, grant func(*engine.Grant) (any, error), err error) {
	c := cv.(*Client)
	sc := scriptOf(s)
	parent, _ := pv.(*Lease)
	if parent == nil {
		res, err = c.execTaking(ctx, sc, keys, args, undo).ToArray()
		return res, grantOnce(ctx, c, nil, func() {}), err
	}
	h := parent.h
	if err := h.beginReentry(); err != nil {
		return nil, grantOnce(ctx, c, nil, func() {}), err
	}
	var once sync.Once
	end := func(ctx context.Context) { once.Do(func() { h.endReentry(ctx) }) }
	res, err = c.execTaking(ctx, sc, keys, args, end).ToArray()
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// Given up on while on its way: execTaking runs end once it is
		// settled.
		return nil, grantOnce(ctx, c, nil, func() {}), err
	}
	grant = grantOnce(ctx, c, parent, func() {
		dctx, cancel := detached(ctx)
		defer cancel()
		end(dctx)
	})
	if err == nil && len(res) >= 2 {
		if flag, _ := res[0].AsInt64(); flag == -1 {
			why, _ := res[1].AsInt64()
			return nil, grant, refusedReentry(parent, &reentryRefusal{reason: refusedStateErr(why)})
		}
	}
	return res, grant, err
}

// grantOnce returns the grant of a script run on c (a re-entry of parent
// when it is not nil): its first call makes the Lease of g (nothing for a
// nil g), then runs done; later calls do nothing.
func grantOnce(ctx context.Context, c *Client, parent *Lease, done func()) func(*engine.Grant) (any, error) {
	var once sync.Once
	return func(g *engine.Grant) (l any, err error) {
		once.Do(func() {
			defer done()
			if g != nil {
				l, err = engineGrant(ctx, c, parent, *g)
			}
		})
		return l, err
	}
}

// beginReentry counts a re-entry of h on its way to Redis. It fails when
// h's ownership ended, or while a release of every hold is on its way (the
// release of the last Lease): the hold the re-entry would add would be
// released with the rest.
func (h *holder) beginReentry() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.done:
		return errorf("%w: the outer lease ended: %w", ErrNotHeld, h.err)
	case h.wiping > 0 || h.wipeUnsure:
		return fmt.Errorf("%w: the outer lease is being released", ErrNotHeld)
	}
	h.entering++
	return nil
}

// endReentry ends what beginReentry counted, once the re-entry's outcome
// was applied: its Lease is among h's leases, or never will be. When it
// was the last re-entry on its way and no Lease of h is left while h is
// not done, the last Lease was released while it was on its way, and left
// the holds it could not account for: they are released now (re-entries
// whose outcome was never known may have added some).
func (h *holder) endReentry(ctx context.Context) {
	h.mu.Lock()
	h.entering--
	orphan := h.entering == 0 && len(h.leases) == 0 && !h.done
	if orphan {
		// From this decision on, no re-entry starts (one that found the
		// parent live before it ended may be about to): its hold would
		// be released with the rest.
		h.wiping++
	}
	h.mu.Unlock()
	if !orphan {
		return
	}
	defer func() {
		h.mu.Lock()
		h.wiping--
		h.mu.Unlock()
	}()
	h.beginRelease()
	defer h.endRelease()
	if _, err := h.kind.unlock(ctx, h, ""); err != nil {
		h.c.log.Warn("redisync: could not release the holds left by re-entries; they expire with their lease", "key", h.key, "err", err)
		h.lose(err) // stop renewing them
		return
	}
	h.finish()
}

// scriptWait is one acquisition of a seam kind (see engine.Wait), on the
// kind's own channels and messages, through the Client's notifier as the
// library's own locks wait: one subscription per channel and kind of
// pub/sub for all the Client's waiters, whose every message wakes them
// all, by generation (notify.go). Messages are for latency, never for
// liveness: the Client's presence pass reads, once per pass, what each
// channel's waiters wait for (the probe), and wakes them when it reads
// free or changed; a waiter also looks again when the holder's lease runs
// out, as its attempt found it. Whatever messages are lost (a publisher on
// the other kind of pub/sub, a broken connection, a holder that died and
// published nothing), a waiter looks again within one pass.
type scriptWait struct {
	w engine.Wait
	c *Client
}

// run attempts, and unless try, waits for a message, the presence pass or
// the end of the holder's lease between attempts, until it acquires or ctx
// ends. Connection errors are retried with backoff; Redis errors are
// returned at once.
// What an attempt got is a Lease, or (for a wait that takes nothing, a
// latch's) any other value that ends the wait.
func (w *scriptWait) run(ctx context.Context, try bool) (_ any, err error) {
	if !try {
		defer func() {
			var holder string
			if w.w.Holder != nil {
				holder = w.w.Holder()
			}
			err = waitEnded(ctx, err, w.w.Primitive, w.w.Name, holder, w.w.Busy)
		}()
	}
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
		l, wait, err := w.w.Attempt(ctx)
		if err != nil {
			if ctx.Err() != nil {
				w.abandon(ctx)
				return nil, ctxErr(ctx, lastErr)
			}
			if try || !transient(err) {
				if transient(err) && w.w.Undo != nil {
					// Its outcome is unknown: given back, as
					// acquisition.run gives back a single attempt's.
					w.c.cleanupBounded(ctx, w.w.Undo)
				}
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
			if err := ctx.Err(); err != nil {
				if l, ok := l.(*Lease); ok {
					w.c.abandonAfter(ctx, l, err)
				}
				return nil, err
			}
			if fellBack {
				w.c.fellBack(w.w.Primitive, w.w.Name, w.w.Name)
			}
			return l, nil
		}
		if try {
			return nil, w.w.Busy
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
func (w *scriptWait) kinds() []pubsubKind {
	var kinds []pubsubKind
	if w.w.Classic || !w.w.Sharded {
		kinds = append(kinds, classicPubSub)
	}
	if w.w.Sharded {
		kinds = append(kinds, shardedPubSub)
	}
	return kinds
}

// joinLive adds to subs the Client's subscriptions of the channel that are
// in effect, and reports whether it has all it listens on. Their waiters
// are then followed already.
func (w *scriptWait) joinLive(subs *waitSet) bool {
	all := true
	for _, k := range w.kinds() {
		all = subs.joinLive(w.c, w.w.Channel, k) && all
	}
	if all {
		w.follow(subs)
	}
	return all
}

// join adds to subs the Client's subscriptions of the channel, subscribing
// where need be, and has the presence pass read the probe for them.
func (w *scriptWait) join(ctx context.Context, subs *waitSet) error {
	for _, k := range w.kinds() {
		if err := subs.join(ctx, w.c, w.w.Channel, k, nil); err != nil {
			return err
		}
	}
	w.follow(subs)
	return nil
}

// follow has the presence pass read the probe for the waiters of the
// channel, once per pass: through the first subscription (both kinds'
// waiters wait on it).
func (w *scriptWait) follow(subs *waitSet) {
	if len(subs.subs) > 0 {
		subs.subs[0].follow(w.w.Probe)
	}
}

// timer returns how long a wait lasts without a message or a presence
// pass: until the holder's lease runs out, when the attempt knew when, and
// the fallback otherwise (fallback true), which only a lost wake-up lets
// end a wait that the next attempt ends in success.
func (w *scriptWait) timer(wait time.Duration) (d time.Duration, fallback bool) {
	if wait > 0 && wait < waiterFallback {
		// A millisecond more: the lease has run out on the server then.
		return wait + time.Millisecond, false
	}
	return waiterFallback, true
}

// sleep waits d: ctx's error when ctx ends first, ErrClosed when the
// Client closes.
func (w *scriptWait) sleep(ctx context.Context, d time.Duration) error {
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
func (w *scriptWait) abandon(ctx context.Context) {
	if w.w.Undo == nil {
		return
	}
	w.c.cleanup(ctx, w.w.Undo)
}
