package redisson

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/internal/engine"

	"github.com/redis/rueidis"
)

// Redisson's fair lock (RFairLock):
//
//	hash NAME: field UUID:THREADID -> hold count, expiry = lease (as RLock)
//	list redisson_lock_queue:{NAME}: the waiters' ids, in arrival order
//	zset redisson_lock_timeout:{NAME}: waiter id -> when it counts as gone,
//	     in ms of the clients' wall clocks
//	channel redisson_lock__channel:{NAME}:UUID:THREADID, one per waiter,
//	     message "0" to the queue's head when the lock is engine.Freed

// defaultRedissonFairWait is Redisson's fairLockWaitTimeout: how long a
// queued waiter may stay away before the others pass it.
const defaultRedissonFairWait = 5 * time.Minute

// WithFairWait sets how long a fair lock waiter of this handle
// counts as waiting after the waiter ahead of it (Redisson's
// fairLockWaitTimeout, 5 minutes by default; a tryLock's wait time in
// Java): a waiter that has not taken the lock by then is passed over, and
// one that went away holds up those behind it at most that long. A Lock
// whose ctx has a deadline uses the time left to it instead, as Java's
// tryLock(waitTime) does. Other Redisson handles ignore it. d must be at
// least a millisecond.
func WithFairWait(d time.Duration) Option {
	return func(c *config) {
		c.fairWait = d
		if d < time.Millisecond {
			c.bad = fmt.Errorf("%w: Redisson fair wait %v is under a millisecond", redisync.ErrInvalidArgument, d)
		}
	}
}

// The scripts of Redisson's fair lock.
var (
	redissonFairLockScript    = newScript("prelude", "fair_prelude", "fair_lock")
	redissonFairUnlockScript  = newScript("prelude", "fair_prelude", "fair_unlock")
	redissonFairReleaseScript = newScript("prelude", "fair_prelude", "fair_release")
	redissonFairForceScript   = newScript("prelude", "fair_prelude", "fair_force")
)

// FairLock is a lock in the layout of Redisson's RFairLock
// (redisson.getFairLock(NAME) in Java): first come, first served among
// Java and Go waiters alike. It is a cheap handle: make one per use or
// share one, from many goroutines.
//
// Holders are as with Lock: field UUID:THREADID, re-entry through
// a Lease's Context, the Client's watchdog and loss detection, the unlock
// latch. A waiter joins Redisson's queue with a timeout after the waiter
// ahead of it (WithFairWait), and is told on its own channel when
// its turn comes; a Lock that gives up (ctx ended, Client closed, an
// error) leaves the queue, bringing the timeouts of those behind it
// forward, as Java's acquireFailed does. A waiter that went away without
// leaving (its process died) holds up those behind it until its timeout,
// in Redisson as here.
//
// What it cannot keep of FairMutex: the timeouts are wall-clock times of
// the clients that wrote them (Redisson's choice), so clock skew between
// hosts moves them; there is no fencing token; a forced unlock is
// reported as redisync.ErrExpired.
type FairLock struct {
	c    *Client
	name string
	keys engine.Keys
	cfg  config
	err  error
}

// FairLock returns the Redisson RFairLock of the given name. An
// invalid name or option is reported by every method, as
// redisync.ErrInvalidArgument.
func (c *Client) FairLock(name string, opts ...Option) *FairLock {
	l := &FairLock{c: c, name: name, keys: redissonLockKeys(name)}
	l.cfg, l.err = newConfig(c, name, opts)
	return l
}

// Name returns the lock's name.
func (l *FairLock) Name() string {
	if l == nil {
		return ""
	}
	return l.name
}

func (l *FairLock) check(ctx context.Context) error {
	if l == nil {
		return fmt.Errorf("%w: nil FairLock", redisync.ErrInvalidArgument)
	}
	return checkHandle("FairLock", l.c, l.err, ctx)
}

func (l *FairLock) object() (*Client, PubSub, string) { return l.c, l.cfg.pubsub, l.name }

func (l *FairLock) client() *Client { return l.c }

// Lock acquires the lock in its turn, waiting as long as ctx allows: in
// Redisson's queue, for the message on its own channel, and looking again
// when the Client's presence pass (a second apart by default) finds the
// lock free or taken by another holder, whatever messages were lost.
//
// It returns, when ctx ends first, an error naming the lock that matches both
// ctx.Err() and redisync.ErrLocked (a single attempt's redisync.ErrLocked never matches
// ctx's error), and redisync.ErrClosed when the Client
// is closed; either way it leaves the queue. Connection errors do not end
// the wait: Lock retries them with backoff until ctx ends. Errors Redis
// replies with are returned at once: redisync.ErrWrongType when the name, its queue
// or its timeouts hold something else than a Redisson fair lock writes
// (a string, a read-write lock). Whenever Lock returns an error nothing is
// held.
func (l *FairLock) Lock(ctx context.Context) (*redisync.Lease, error) {
	return lockHandle(ctx, l, false)
}

// TryLock makes a single attempt, without queueing: it takes the lock
// only when it is free and nobody waits for it (Java's tryLock()). It
// returns redisync.ErrLocked otherwise, redisync.ErrWrongType as Lock does, and any error
// from Redis or the connection at once.
func (l *FairLock) TryLock(ctx context.Context) (*redisync.Lease, error) {
	return lockHandle(ctx, l, true)
}

// Acquire acquires the lock in the background and delivers one Lease on
// the returned channel, then closes it, as Mutex.Acquire does: the Lease
// reports failure through Err, so check Err first; cancel ctx to give up,
// and a Lease not yet received when ctx ends is released.
func (l *FairLock) Acquire(ctx context.Context) <-chan *redisync.Lease { return acquireHandle(ctx, l) }

func nowMs() string { return strconv.FormatInt(time.Now().UnixMilli(), 10) }

func (l *FairLock) acquire(ctx context.Context, try bool) (*redisync.Lease, error) {
	c := l.c
	how, classic, sharded, err := c.redissonPubSub(ctx, l.cfg.pubsub, l.name)
	if err != nil {
		return nil, err
	}
	kind := redissonFairKinds[how]
	parent, pinfo := c.parentOf(ctx, l.keys.Lock)
	owner := c.newOwner()
	lease, watchdog := l.cfg.leaseOn(c)
	if parent != nil {
		owner, lease, watchdog = pinfo.Owner, pinfo.Lease, pinfo.Watchdog
	}
	wait := l.cfg.fairWait
	if dl, ok := ctx.Deadline(); ok {
		wait = max(time.Until(dl), time.Millisecond)
	}
	waitMs := strconv.FormatInt(wait.Milliseconds(), 10)
	queue := "1"
	switch {
	case parent != nil:
		// A re-entry only adds a hold to the parent's ownership: it never
		// takes the lock afresh, nor a place in the queue (which would hold
		// every waiter behind it back until its timeout).
		queue = reentryMode(parent)
	case try:
		queue = "0"
	}
	keys := []string{l.keys.Lock, l.keys.Queue, l.keys.Waiters}
	leaseMs := strconv.FormatInt(lease.Milliseconds(), 10)
	queued := false
	undo := func(ctx context.Context) {
		if parent != nil {
			// A re-entry whose outcome is unknown: never queued, and the
			// outer lease's last Unlock releases every hold (see
			// redissonAttempt).
			return
		}
		l.leave(ctx, owner, how, waitMs)
	}
	var holder lastHolder
	w := engine.Wait{
		Channel: l.keys.Channel + ":" + owner, Classic: classic, Sharded: sharded,
		Probe: redissonHolderProbe(l.name), Primitive: kind.Primitive, Name: l.name,
		Busy:   fmt.Errorf("%w: Redisson fair lock %s", redisync.ErrLocked, l.name),
		Holder: holder.get,
		Attempt: func(ctx context.Context) (any, time.Duration, error) {
			sent := time.Now()
			res, grant, err := c.run(ctx, parent, redissonFairLockScript, keys, []string{leaseMs, owner, waitMs, nowMs(), queue}, undo)
			defer grant(nil)
			if err != nil {
				return nil, 0, redisErr("acquire Redisson fair lock "+l.name, err)
			}
			if len(res) < 2 {
				return nil, 0, fmt.Errorf("redisync: acquire Redisson fair lock: unexpected reply of %d elements", len(res))
			}
			if ok, _ := res[0].AsInt64(); ok != 1 {
				queued = !try
				ttl, _ := res[1].AsInt64()
				holder.saw(res)
				return nil, time.Duration(ttl) * time.Millisecond, nil
			}
			queued = false
			gl, err := grant(&engine.Grant{Kind: kind, Name: l.name, Keys: l.keys, Key: l.keys.Lock, Owner: owner, Hold: redissonHold(l.cfg.latch), Lease: lease, Watchdog: watchdog, Sent: sent})
			if err != nil {
				// The outer lease ended meanwhile, or a late grant was not
				// confirmed: the hold is given back, in the background
				// once the call's grace passed.
				c.cleanup(ctx, func(ctx context.Context) { l.releaseHold(ctx, owner, how, lease) })
			}
			return gl, 0, err
		},
		Undo: undo,
	}
	gl, err := c.wait(ctx, w, try)
	if err != nil && queued {
		// Given up: leave the queue, as Java's acquireFailed does.
		c.cleanup(ctx, func(ctx context.Context) { l.leave(ctx, owner, how, waitMs) })
	}
	return gl, err
}

// leave takes owner off the queue and releases what it may hold.
func (l *FairLock) leave(ctx context.Context, owner, how, waitMs string) {
	err := redissonFairReleaseScript.Exec(ctx, l.c.rc, []string{l.keys.Lock, l.keys.Queue, l.keys.Waiters, l.keys.Channel},
		[]string{owner, how, nowMs(), waitMs}).Error()
	if err != nil {
		l.c.log.Warn("redisync: could not leave the queue of a Redisson fair lock; the waiters behind wait for its timeout", "key", l.keys.Lock, "err", err)
	}
}

// releaseHold gives back one hold taken for a lease that could not be made,
// with ctx (detached from the acquisition's: see cleanup).
func (l *FairLock) releaseHold(ctx context.Context, owner, how string, lease time.Duration) {
	redissonFairUnlockScript.Exec(ctx, l.c.rc, redissonFairUnlockKeys(l.name, l.keys, redissonRequestID()),
		[]string{strconv.FormatInt(lease.Milliseconds(), 10), owner, "1", how, "0", nowMs()})
}

func redissonFairUnlockKeys(name string, keys engine.Keys, request string) []string {
	return []string{keys.Lock, keys.Queue, keys.Waiters, keys.Channel, redissonLatchKey(name, request)}
}

// redissonFairKinds are the lease kinds of RFairLock holders, by
// publishing mode.
var redissonFairKinds = byHow(newRedissonFairKind)

func newRedissonFairKind(how string) *engine.Kind {
	return &engine.Kind{
		Primitive: "redisson_fair_lock",
		Tracked:   true,
		Counted:   true,
		Renew:     redissonRenewScript,
		Release:   redissonFairReleaseScript,
		ReleaseAll: func(h engine.Holder) rueidis.LuaExec {
			return rueidis.LuaExec{Keys: []string{h.Key, h.Keys.Queue, h.Keys.Waiters, h.Keys.Channel}, Args: []string{h.Owner, how, nowMs(), ""}}
		},
		Unlock: func(ctx context.Context, h engine.Holder, hold string, all bool) (engine.State, bool, error) {
			return redissonFairUnlock(ctx, h, hold, all, how)
		},
	}
}

// redissonFairUnlock is redissonUnlock for a fair lock: a lock freed is
// told to the queue's head.
func redissonFairUnlock(ctx context.Context, h engine.Holder, hold string, all bool, how string) (engine.State, bool, error) {
	return redissonRelease(ctx, h, hold, all, redissonFairUnlockScript, "unlock Redisson fair lock", func(req string) ([]string, string) {
		keys := redissonFairUnlockKeys(h.Name, h.Keys, req)
		return keys, keys[4]
	}, how, nowMs())
}

// Inspect reads the lock's state: holders, TTL, and the length of its
// queue (Waiters). A key of another layout is redisync.ErrWrongType; an error from
// Redis or the connection, or ctx's end, is returned as it comes. It
// changes nothing.
func (l *FairLock) Inspect(ctx context.Context) (LockState, error) {
	if err := l.check(ctx); err != nil {
		return LockState{}, err
	}
	return InspectLock(ctx, l.c.rc, l.name)
}

// ForceUnlock deletes the lock whoever holds it and tells the queue's
// head, as Java's forceUnlock of a fair lock. It reports whether the lock
// was held. A Go holder's Lease reports redisync.ErrExpired (about one round trip
// later with DetectOnChange, at its next renewal otherwise). A key of
// another layout is left alone: redisync.ErrWrongType. For operators: a holder that
// is alive loses mutual exclusion.
func (l *FairLock) ForceUnlock(ctx context.Context) (bool, error) {
	return found(runOn(ctx, l, redissonFairForceScript, "force unlock Redisson fair lock", func(how string) ([]string, []string) {
		return []string{l.keys.Lock, l.keys.Queue, l.keys.Waiters, l.keys.Channel}, []string{how, nowMs()}
	}))
}
