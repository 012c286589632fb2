package redisson

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/internal/engine"

	"github.com/redis/rueidis"
)

// The keys, channels and messages of RLock and RFencedLock are Redisson's,
// as its scripts write and read them; the scripts that do so here are this
// library's own:
//
//	RLock         hash NAME: field UUID:THREADID -> hold count, expiry = lease
//	              channel redisson_lock__channel:{NAME}, message "0"
//	              unlock latch redisson_unlock_latch:{NAME}:REQUESTID
//	RFencedLock   as RLock, and the counter redisson_lock_token:{NAME}

// PubSub is how the Redisson locks of a Client publish their
// messages. Redisson 3.22.0 and later, on Redis Cluster 7.0 or newer,
// publish and subscribe with sharded pub/sub (SPUBLISH, SSUBSCRIBE) unless
// their ClusterServersConfig.shardedSubscriptionMode (3.29.0 and later) is
// OFF; they use classic pub/sub on standalone Redis, Sentinel, older
// Clusters, and in older versions, as node-redisson does. The default,
// PubSubAuto, publishes both ways wherever the servers have sharded
// pub/sub, so that it wakes every kind of Java or Node waiter. Go waiters
// listen on both kinds wherever the servers have sharded pub/sub,
// whatever the mode, so a publisher of either kind wakes them; the
// waiters of a Client share one subscription per channel and kind.
type PubSub int

const (
	// PubSubAuto, the default, publishes every message both ways
	// (PUBLISH and SPUBLISH) on servers that have sharded pub/sub
	// (Redis 7.0 or newer, standalone or Cluster), classic elsewhere:
	// it reaches Java waiters whatever their Redisson version and
	// shardedSubscriptionMode, and Node waiters.
	PubSubAuto PubSub = iota
	// PubSubClassic publishes with PUBLISH alone: it reaches Redisson
	// before 3.22.0, shardedSubscriptionMode OFF, node-redisson, and not
	// a Redisson that subscribes sharded.
	PubSubClassic
	// PubSubSharded publishes with SPUBLISH alone (Redis 7.0 or newer):
	// it reaches shardedSubscriptionMode ON (AUTO on a Cluster of Redis 7)
	// and not a client that subscribes classically.
	PubSubSharded
	// PubSubBoth publishes every message both ways, as PubSubAuto does
	// on servers that have sharded pub/sub; it needs them.
	PubSubBoth
)

// Option configures the handles of a Client (given to New: the defaults of
// all of them) or one handle (given to its constructor: overriding the
// Client's). An option that does not apply to a kind of handle is ignored
// by it.
type Option func(*config)

type config struct {
	lease time.Duration // 0: renewed by the watchdog
	// renewed is the lease the watchdog renews, 0 for the Client's
	// watchdog lease.
	renewed time.Duration
	pubsub  PubSub
	latch   time.Duration
	// fairWait is RFairLock's wait of a queued waiter.
	fairWait time.Duration
	bad      error
}

// defaultRedissonLatch is how long an unlock latch lives: Redisson's own
// default, (timeout 3 s + retryDelay of up to 2 s) × 4 retryAttempts.
const defaultRedissonLatch = 20 * time.Second

// WithLeaseTime gives every acquisition a lease of d that the
// watchdog does not renew, as Java's lock(leaseTime, unit) does: the lock
// expires d after it was taken unless released first, and the Lease
// reports redisync.ErrExpired a tenth of d before that. Without it the lease is the
// Client's watchdog lease (WithWatchdogLease, Redisson's
// lockWatchdogTimeout), renewed every third of it. d must be at least a
// millisecond.
func WithLeaseTime(d time.Duration) Option {
	return func(c *config) {
		c.lease, c.renewed = d, 0
		if d < time.Millisecond {
			c.bad = fmt.Errorf("%w: Redisson lease time %v is under a millisecond", redisync.ErrInvalidArgument, d)
		}
	}
}

// WithRenewedLease gives every acquisition a lease of d that the watchdog
// renews, every third of d, in place of the Client's watchdog lease
// (WithWatchdogLease, Redisson's lockWatchdogTimeout), as
// redisync.WithRenewedLease does for the library's own locks: what a crash
// of the holder costs the next one is d, while a live holder keeps the
// lock. A Lease is reported lost (redisync.ErrConnectionLost) when no
// renewal succeeded for nine tenths of d. It applies to Lock, FencedLock,
// FairLock, ReadWriteLock and PermitExpirableSemaphore; re-entries keep the
// lease of their outer Lease. Of WithLeaseTime and WithRenewedLease, the
// last given wins, so a handle's overrides the Client's. d must be at
// least a millisecond.
func WithRenewedLease(d time.Duration) Option {
	return func(c *config) {
		c.renewed, c.lease = d, 0
		if d < time.Millisecond {
			c.bad = fmt.Errorf("%w: Redisson renewed lease %v is under a millisecond", redisync.ErrInvalidArgument, d)
		}
	}
}

// leaseOn is the lease of an acquisition on c, and whether the watchdog
// renews it: WithLeaseTime's fixed lease, or WithRenewedLease's, or the
// Client's watchdog lease.
func (cfg config) leaseOn(c *Client) (time.Duration, bool) {
	switch {
	case cfg.lease > 0:
		return cfg.lease, false
	case cfg.renewed > 0:
		return cfg.renewed, true
	}
	return c.watchdogLease, true
}

// WithPubSub sets how the lock publishes its messages (default
// PubSubAuto, which reaches every kind of waiter). A mode that the other
// clients of the lock do not listen on delays their waiters: Go waiters
// until their Client's next presence pass (a second apart by default),
// Redisson's until the holder's remaining lease runs out: on servers that
// have both kinds, the Client logs at WARN, the first time per object name,
// that a narrowed mode cannot reach waiters that listen the other way. Give
// it to New for every handle of a Client, or to one handle.
func WithPubSub(m PubSub) Option {
	return func(c *config) {
		c.pubsub = m
		if m < PubSubAuto || m > PubSubBoth {
			c.bad = fmt.Errorf("%w: unknown PubSub %d", redisync.ErrInvalidArgument, int(m))
		}
	}
}

// WithUnlockLatch sets how long the unlock latch of an Unlock lives
// (default 20 s, Redisson's): a retry of Unlock (after an error whose
// outcome is unknown) within that time gets the first attempt's result.
// d must be at least a millisecond.
func WithUnlockLatch(d time.Duration) Option {
	return func(c *config) {
		c.latch = d
		if d < time.Millisecond {
			c.bad = fmt.Errorf("%w: Redisson unlock latch %v is under a millisecond", redisync.ErrInvalidArgument, d)
		}
	}
}

// newConfig applies the Client's default options, then opts, and checks
// the handle's Client and name.
func newConfig(c *Client, name string, opts []Option) (config, error) {
	cfg := config{latch: defaultRedissonLatch, fairWait: defaultRedissonFairWait}
	if err := c.invalid(); err != nil {
		return cfg, err
	}
	for _, o := range append(append([]Option(nil), c.defaults...), opts...) {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case validName(name) != nil:
		return cfg, validName(name)
	case cfg.bad != nil:
		return cfg, cfg.bad
	case c.cluster && strings.Contains(name, "{") && !engine.HasHashTag(name):
		return cfg, fmt.Errorf("%w: Redisson name %q contains '{' but no hash tag: its lock and channel would be in different Cluster slots", redisync.ErrInvalidArgument, name)
	}
	return cfg, nil
}

// redissonPrefixName is Java's RedissonObject.prefixName.
func redissonPrefixName(prefix, name string) string {
	if strings.Contains(name, "{") {
		return prefix + ":" + name
	}
	return prefix + ":{" + name + "}"
}

// redissonSuffixName is Java's RedissonObject.suffixName.
func redissonSuffixName(name, suffix string) string {
	if strings.Contains(name, "{") {
		return name + ":" + suffix
	}
	return "{" + name + "}:" + suffix
}

// redissonLockKeys are the keys of an RLock, RFencedLock or RFairLock of
// one name, in a engine.Keys: lock is the hash, channel the unlock channel,
// queue and waiters the fair lock's list and zset.
func redissonLockKeys(name string) engine.Keys {
	return engine.Keys{
		Lock:    name,
		Channel: redissonPrefixName("redisson_lock__channel", name),
		Queue:   redissonPrefixName("redisson_lock_queue", name),
		Waiters: redissonPrefixName("redisson_lock_timeout", name),
	}
}

func redissonTokenKey(name string) string { return redissonPrefixName("redisson_lock_token", name) }

func redissonLatchKey(name, request string) string {
	return redissonPrefixName("redisson_unlock_latch", name) + ":" + request
}

// The scripts of the Redisson layouts.
var (
	redissonLockScript    = newScript("prelude", "lock")
	redissonUnlockScript  = newScript("prelude", "unlock")
	redissonReleaseScript = newScript("prelude", "release")
	redissonRenewScript   = newScript("renew")
	redissonForceScript   = newScript("prelude", "force")
)

// redissonHolderProbe reads a holder of the Redisson lock hash name (its
// one field for an RLock or RFairLock), none while it is free: what the
// presence pass reads for its waiters (see subscription.follow).
func redissonHolderProbe(name string) probe {
	return func(rc rueidis.Client) rueidis.Completed { return rc.B().Hrandfield().Key(name).Build() }
}

// redissonSharded reports whether c's servers have sharded pub/sub
// (Redis 7.0 or newer: they answer PUBSUB SHARDNUMSUB), found out once.
// The question is sent as the Client's other commands that must not
// outlive their call are (engine.Client.Cleanup): the caller waits for the
// answer until its call's grace passed at most, so that a server that does
// not answer does not hold the call past its ctx.
func (c *Client) redissonSharded(ctx context.Context) (bool, error) {
	if v := c.shards.Load(); v != 0 {
		return v == 2, nil
	}
	failed := make(chan error, 1)
	c.cleanup(ctx, func(ctx context.Context) {
		err := c.rc.Do(ctx, c.rc.B().PubsubShardnumsub().Build()).Error()
		if _, reply := rueidis.IsRedisErr(err); err != nil && !reply {
			failed <- err
			return
		}
		v := int32(1)
		if err == nil {
			v = 2
		}
		c.shards.Store(v)
	})
	if v := c.shards.Load(); v != 0 {
		return v == 2, nil
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	select {
	case err := <-failed:
		return false, redisErr("PUBSUB SHARDNUMSUB", err)
	default:
		return false, redisErr("PUBSUB SHARDNUMSUB", context.DeadlineExceeded)
	}
}

// redissonPubSub returns how to publish ('c' classic, 's' sharded, 'b'
// both) and which kinds to listen on.
//
// PubSubAuto publishes both ways wherever the servers have sharded pub/sub,
// and Go waiters listen both ways there whatever the mode: a Java fleet
// subscribes classically or sharded depending on its Redisson version and
// shardedSubscriptionMode, which this side cannot see, and a message its
// waiters do not hear costs them the holder's whole remaining lease. Asking
// Redis who listens (PUBSUB NUMSUB, SHARDNUMSUB) would cost a round trip
// per release and still miss a subscriber that comes between the question
// and the release, or listens on another node of a Cluster; the second
// PUBLISH or SPUBLISH in the release script costs no round trip (see the
// package doc for its measured cost).
//
// A mode narrowed to one way (PubSubClassic, PubSubSharded) on servers that
// have both cannot reach waiters that listen the other way: it is logged at
// WARN, once per object (see warnNarrow), and counted at every operation
// in the redisync.Client's Metrics (PublishedOneWay).
func (c *Client) redissonPubSub(ctx context.Context, m PubSub, name string) (how string, classic, sharded bool, err error) {
	has, err := c.redissonSharded(ctx)
	if err != nil {
		return "", false, false, err
	}
	if has && (m == PubSubClassic || m == PubSubSharded) {
		c.eng.PublishedOneWay(name)
		c.warnNarrow(name, m)
	}
	switch m {
	case PubSubClassic:
		how = "c"
	case PubSubSharded:
		how = "s"
	case PubSubBoth:
		how = "b"
	default:
		how = "c"
		if has {
			how = "b"
		}
	}
	return how, true, has || how != "c", nil
}

// byHow makes, with f, one value per way of publishing that
// redissonPubSub picks: "c" (classic), "s" (sharded), "b" (both).
func byHow[V any](f func(how string) V) map[string]V {
	return map[string]V{"c": f("c"), "s": f("s"), "b": f("b")}
}

// maxNarrowWarnings bounds the names a Client remembers having warned
// about (warnNarrow): names may be made per request.
const maxNarrowWarnings = 1024

// warnNarrow logs at WARN, the first time per name, that the object of
// that name publishes one way (m) on servers that have both kinds of
// pub/sub, so that a waiter that listens the other way (a Java fleet whose
// Redisson version and shardedSubscriptionMode say so) is woken only when
// the holder's lease runs out. After maxNarrowWarnings names it says so
// once and stops.
func (c *Client) warnNarrow(name string, m PubSub) {
	if _, seen := c.narrow.Load(name); seen {
		return
	}
	n := c.narrowed.Add(1)
	if n > maxNarrowWarnings {
		if n == maxNarrowWarnings+1 {
			c.log.Warn("redisync: more Redisson objects publish their messages one way only; not logged any more")
		}
		return
	}
	if _, seen := c.narrow.LoadOrStore(name, struct{}{}); seen {
		return
	}
	only, missed := "classic pub/sub (PUBLISH)", "subscribe sharded (Redisson 3.22.0 and later on a Cluster of Redis 7, shardedSubscriptionMode AUTO or ON)"
	if m == PubSubSharded {
		only, missed = "sharded pub/sub (SPUBLISH)", "subscribe classically (Redisson before 3.22.0, shardedSubscriptionMode OFF, node-redisson)"
	}
	c.log.Warn("redisync: this Redisson object publishes its releases by "+only+" alone, set by WithPubSub: waiters that "+missed+
		" are woken only when the holder's lease runs out; the default, PubSubAuto, reaches both", "name", name)
}

// redissonRequestID is a fresh request id, as Redisson's generateId: 16
// random bytes in hex.
func redissonRequestID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Lock is a lock in the layout of Redisson's RLock (and, made by
// FencedLock, RFencedLock). It is a cheap handle: make one per use
// or share one, from many goroutines.
//
// The holder's field is UUID:THREADID, where UUID is the Client's ID and
// THREADID a number the Client gives each ownership; Java code finds it
// with isHeldByThread only for its own threads. Re-entry works as with a
// Mutex: acquiring the lock with a lease's Context (or a context derived
// from it) adds one hold in that field, and each Unlock takes one back.
//
// Compared with Mutex, which keeps its own layout: RLock is not fair (a
// release wakes every waiter of this Client and one per Redisson client,
// and whoever comes first takes it); plain RLock has no fencing token
// (Token is 0: use FencedLock); a forced unlock is reported as
// redisync.ErrExpired, not redisync.ErrForceUnlocked; a message lost costs the waiters of
// this Client up to their Client's next presence pass (a second apart by
// default), which reads the lock for them all, and Java waiters up to the
// holder's remaining lease. Mutual exclusion,
// the watchdog (a third of the lease), loss detection and the unlock latch
// are as in Redisson.
type Lock struct {
	c      *Client
	name   string
	keys   engine.Keys
	cfg    config
	fenced bool
	err    error
}

// Lock returns the Redisson RLock of the given name: the hash NAME,
// as Java's redisson.getLock(NAME). An invalid name or option is reported
// by every method, as redisync.ErrInvalidArgument.
func (c *Client) Lock(name string, opts ...Option) *Lock {
	l := &Lock{c: c, name: name, keys: redissonLockKeys(name)}
	l.cfg, l.err = newConfig(c, name, opts)
	return l
}

// FencedLock returns the Redisson RFencedLock of the given name, as
// Java's redisson.getFencedLock(NAME): an RLock whose every acquisition,
// re-entries included, counts the token redisson_lock_token:{NAME} up by
// one. A Lease's Token is the token of the acquisition that made its
// ownership (re-entries share it, as they share the lock), so it means the
// same as Java's lockAndGetToken: pass it to the resource the lock guards,
// which rejects tokens lower than the highest it has seen. The counter
// never expires, as in Redisson.
func (c *Client) FencedLock(name string, opts ...Option) *Lock {
	l := c.Lock(name, opts...)
	l.fenced = true
	return l
}

// Name returns the lock's name.
func (l *Lock) Name() string {
	if l == nil {
		return ""
	}
	return l.name
}

func (l *Lock) check(ctx context.Context) error {
	if l == nil {
		return fmt.Errorf("%w: nil Lock", redisync.ErrInvalidArgument)
	}
	return checkHandle("Lock", l.c, l.err, ctx)
}

func (l *Lock) client() *Client { return l.c }

func (l *Lock) object() (*Client, PubSub, string) { return l.c, l.cfg.pubsub, l.name }

// Lock acquires the lock, waiting as long as ctx allows: for Redisson's
// unlock message on the lock's channel, which the Client's waiters share
// one subscription to, and looking again when the holder's lease runs out
// or the Client's presence pass (a second apart by default) finds the lock
// free or taken by another holder, whatever messages were lost.
//
// It returns, when ctx ends first, an error naming the lock that matches both
// ctx.Err() and redisync.ErrLocked (a single attempt's redisync.ErrLocked never matches
// ctx's error), and redisync.ErrClosed when the Client
// is closed. Connection errors do not end the wait: Lock retries them with
// backoff until ctx ends, then returns ctx's error wrapping the last of
// them. Errors Redis replies with are returned at once: redisync.ErrWrongType when
// the name holds something else than a Redisson lock (a string, a Redisson
// read-write lock, a fair lock with queued waiters). Whenever Lock returns
// an error nothing is held.
func (l *Lock) Lock(ctx context.Context) (*redisync.Lease, error) { return lockHandle(ctx, l, false) }

// TryLock makes a single attempt. It returns redisync.ErrLocked when another owner
// holds the lock, redisync.ErrWrongType as Lock does, and any error from Redis or
// the connection at once.
func (l *Lock) TryLock(ctx context.Context) (*redisync.Lease, error) { return lockHandle(ctx, l, true) }

// Acquire acquires the lock in the background and delivers one Lease on
// the returned channel, then closes it, as Mutex.Acquire does: the Lease
// reports failure through Err (ctx's error, redisync.ErrClosed, redisync.ErrWrongType, a
// Redis error), so check Err first; cancel ctx to give up, and a Lease not
// yet received when ctx ends is released.
func (l *Lock) Acquire(ctx context.Context) <-chan *redisync.Lease { return acquireHandle(ctx, l) }

func (l *Lock) acquire(ctx context.Context, try bool) (*redisync.Lease, error) {
	c := l.c
	how, classic, sharded, err := c.redissonPubSub(ctx, l.cfg.pubsub, l.name)
	if err != nil {
		return nil, err
	}
	kind := redissonLockKinds[how]
	parent, pinfo := c.parentOf(ctx, l.keys.Lock)
	owner := c.newOwner()
	lease, watchdog := l.cfg.leaseOn(c)
	if parent != nil {
		owner, lease, watchdog = pinfo.Owner, pinfo.Lease, pinfo.Watchdog
	}
	fenced := "0"
	if l.fenced {
		fenced = "1"
	}
	keys := []string{l.keys.Lock, l.keys.Queue, redissonTokenKey(l.name)}
	args := []string{strconv.FormatInt(lease.Milliseconds(), 10), owner, fenced, reentryMode(parent)}
	undo := func(ctx context.Context) {
		if parent != nil {
			// A re-entry whose outcome is unknown: the outer lease's last
			// Unlock releases every hold (see redissonAttempt).
			return
		}
		if err := redissonReleaseScript.Exec(ctx, c.rc, []string{l.keys.Lock, l.keys.Channel}, []string{owner, how}).Error(); err != nil {
			c.log.Warn("redisync: could not undo a Redisson lock acquisition whose outcome is unknown; if it took the lock, that expires with its lease", "key", l.keys.Lock, "err", err)
		}
	}
	var holder lastHolder
	w := engine.Wait{
		Channel: l.keys.Channel, Classic: classic, Sharded: sharded,
		Probe: redissonHolderProbe(l.name), Primitive: kind.Primitive, Name: l.name,
		Busy:   fmt.Errorf("%w: Redisson lock %s", redisync.ErrLocked, l.name),
		Holder: holder.get,
		Attempt: func(ctx context.Context) (any, time.Duration, error) {
			sent := time.Now()
			res, grant, err := c.run(ctx, parent, redissonLockScript, keys, args, undo)
			defer grant(nil)
			if err != nil {
				return nil, 0, redisErr("acquire Redisson lock "+l.name, err)
			}
			if len(res) < 2 {
				return nil, 0, fmt.Errorf("redisync: acquire Redisson lock: unexpected reply of %d elements", len(res))
			}
			if ok, _ := res[0].AsInt64(); ok != 1 {
				pttl, _ := res[1].AsInt64()
				holder.saw(res)
				return nil, time.Duration(pttl) * time.Millisecond, nil
			}
			token, _ := res[2].AsInt64()
			gl, err := grant(&engine.Grant{Kind: kind, Name: l.name, Keys: l.keys, Key: l.keys.Lock, Owner: owner, Hold: redissonHold(l.cfg.latch), Token: token, Lease: lease, Watchdog: watchdog, Sent: sent})
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
	return c.wait(ctx, w, try)
}

// releaseHold gives back one hold taken for a lease that could not be made,
// with ctx (detached from the acquisition's: see cleanup).
func (l *Lock) releaseHold(ctx context.Context, owner, how string, lease time.Duration) {
	redissonUnlockScript.Exec(ctx, l.c.rc, []string{l.keys.Lock, l.keys.Channel, redissonLatchKey(l.name, redissonRequestID())},
		[]string{strconv.FormatInt(lease.Milliseconds(), 10), owner, "1", how, "0"})
}

// redissonLockKinds are the lease kinds of RLock holders, by publishing
// mode.
var redissonLockKinds = byHow(newRedissonLockKind)

func newRedissonLockKind(how string) *engine.Kind {
	return &engine.Kind{
		Primitive: "redisson_lock",
		Tracked:   true,
		Counted:   true,
		Renew:     redissonRenewScript,
		Release:   redissonReleaseScript,
		ReleaseAll: func(h engine.Holder) rueidis.LuaExec {
			return rueidis.LuaExec{Keys: []string{h.Key, h.Keys.Channel}, Args: []string{h.Owner, how}}
		},
		Unlock: func(ctx context.Context, h engine.Holder, hold string, all bool) (engine.State, bool, error) {
			return redissonUnlock(ctx, h, hold, all, how)
		},
	}
}

// redissonHold is the hold of a Lease of a Redisson lock: the request id
// of its Unlock and how long the unlock latch lives, in ms.
func redissonHold(latch time.Duration) string {
	return redissonRequestID() + "/" + strconv.FormatInt(latch.Milliseconds(), 10)
}

// redissonUnlock releases one hold of a Redisson lock holder ("" for every
// hold), as redissonRelease does.
func redissonUnlock(ctx context.Context, h engine.Holder, hold string, all bool, how string) (engine.State, bool, error) {
	return redissonRelease(ctx, h, hold, all, redissonUnlockScript, "unlock Redisson lock", func(req string) ([]string, string) {
		latch := redissonLatchKey(h.Name, req)
		return []string{h.Key, h.Keys.Channel, latch}, latch
	}, how)
}

// redissonRelease releases one hold of a Redisson lock holder ("" for every
// hold), or every hold when all, with the unlock script s: the hold's
// request id names the unlock latch, so a retried Unlock of one Lease gets
// the first attempt's result, as in Redisson. The Client decides all (see
// engine.Kind.Counted): the holder's last Lease releases every hold while
// no re-entry is on its way, so that a re-entry whose outcome was unknown
// never keeps the lock. keys gives the script's keys for a request id, and
// the latch's key among them; the script's arguments are the lease (ms),
// the owner, the latch's life (ms), how to publish, '1' to release every
// hold, then extra. what names the operation in errors. answered is false
// when the outcome is unknown.
func redissonRelease(ctx context.Context, h engine.Holder, hold string, all bool, s engine.Script, what string,
	keys func(req string) ([]string, string), how string, extra ...string) (engine.State, bool, error) {
	if hold == "" {
		hold = redissonHold(defaultRedissonLatch)
	}
	req, latchMs, _ := strings.Cut(hold, "/")
	flag := "0"
	if all {
		flag = "1"
	}
	ks, latch := keys(req)
	args := append([]string{strconv.FormatInt(h.Lease.Milliseconds(), 10), h.Owner, latchMs, how, flag}, extra...)
	n, err := s.Exec(ctx, h.RC, ks, args).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return engine.NotHeld, false, redisErr(what+" "+h.Name, err)
	}
	// The result is known: the latch has done its work.
	h.RC.Do(ctx, h.RC.B().Del().Key(latch).Build())
	switch {
	case err != nil:
		return engine.NotHeld, true, nil
	case n == 1:
		return engine.Freed, true, nil
	}
	return engine.StillHeld, true, nil
}

// reentryMode is the argument that makes a Redisson acquire script a
// re-entry of parent ("r": one more hold of the parent's ownership, only
// while it holds; never a free lock taken, nor a place in a queue), ""
// when parent is nil.
func reentryMode(parent *redisync.Lease) string {
	if parent == nil {
		return ""
	}
	return "r"
}

// LockState is a snapshot of a lock in Redisson's RLock layout.
type LockState struct {
	// Locked tells whether the hash exists.
	Locked bool
	// Holders are the hash's fields, UUID:THREADID, with their hold
	// counts: one holder for an RLock.
	Holders []Holder
	// TTL is the remaining lease; negative when the key has no expiry.
	TTL time.Duration
	// Waiters is the length of the fair lock's queue (0 for an RLock).
	Waiters int
	// Token is the last fencing token an RFencedLock of the name gave out.
	Token uint64
}

// Holder is one field of a Redisson lock hash.
type Holder struct {
	// Owner is the field: Redisson's UUID:THREADID (this library's
	// Client ID and a number for a Go holder).
	Owner string
	// Holds is the hold count.
	Holds int
}

// ClientID returns the UUID part of the owner (the Redisson client's id, or
// the Go Client's ID), also for a read-write lock's writer field
// UUID:THREADID:write.
func (h Holder) ClientID() string {
	return clientIDOf(strings.TrimSuffix(h.Owner, redissonWriteSuffix))
}

// Owner returns the field of the Redisson lock hash that l holds by, as
// Inspect shows it in Holder.Owner and Java's logs and isHeldByThread see
// it: UUID:THREADID for a Lease of a Lock, FencedLock or FairLock and for
// a read Lease of a ReadWriteLock, UUID:THREADID:write for a write Lease,
// where UUID is the ID of the redisync.Client that took it (see
// Holder.ClientID) and THREADID the number that Client gave the ownership;
// re-entries share their outer Lease's. It stays the same once the Lease
// ended. It returns "" for a nil Lease, one whose acquisition failed, and
// one that holds no field of a Redisson lock hash: a semaphore's permits,
// a lock of package redisync.
func Owner(l *redisync.Lease) string {
	info, ok := leaseInfo(l)
	if !ok || info.Kind == nil {
		return ""
	}
	switch info.Kind.Primitive {
	case redissonLockKinds["c"].Primitive, redissonFairKinds["c"].Primitive:
		return info.Owner
	}
	if isRedissonRWKind(info.Kind) {
		return info.Owner
	}
	return ""
}

// Inspect reads the lock's state (two round trips when it is held). A key
// of another layout is redisync.ErrWrongType; an error from Redis or the connection,
// or ctx's end, is returned as it comes. It changes nothing.
func (l *Lock) Inspect(ctx context.Context) (LockState, error) {
	if err := l.check(ctx); err != nil {
		return LockState{}, err
	}
	return InspectLock(ctx, l.c.rc, l.name)
}

// InspectLock reads the state of the Redisson lock (RLock,
// RFencedLock or RFairLock) of the given name through rc: what `redisync
// inspect` shows. A key of another layout is redisync.ErrWrongType; a name with no
// lock is a state with Locked false.
func InspectLock(ctx context.Context, rc rueidis.Client, name string) (LockState, error) {
	var st LockState
	if rc == nil || ctx == nil || name == "" {
		return st, fmt.Errorf("%w: nil client or context, or empty name", redisync.ErrInvalidArgument)
	}
	keys := redissonLockKeys(name)
	res := rc.DoMulti(ctx,
		rc.B().Type().Key(name).Build(),
		rc.B().Pttl().Key(name).Build(),
		rc.B().Llen().Key(keys.Queue).Build(),
		rc.B().Get().Key(redissonTokenKey(name)).Build())
	for _, r := range res {
		if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
			return st, redisErr("inspect Redisson lock "+name, err)
		}
	}
	switch t, _ := res[0].ToString(); t {
	case "none":
	case "hash":
		all, err := rc.Do(ctx, rc.B().Hgetall().Key(name).Build()).AsStrMap()
		if err != nil {
			return st, redisErr("inspect Redisson lock "+name, err)
		}
		if _, rw := all["mode"]; rw {
			return st, fmt.Errorf("%w: %s holds a Redisson read-write lock", redisync.ErrWrongType, name)
		}
		for f, v := range all {
			n, _ := strconv.Atoi(v)
			st.Holders = append(st.Holders, Holder{Owner: f, Holds: n})
		}
		st.Locked = len(all) > 0
	default:
		return st, fmt.Errorf("%w: %s holds a %s, not a Redisson lock", redisync.ErrWrongType, name, t)
	}
	if st.Locked {
		pttl, _ := res[1].AsInt64()
		st.TTL = time.Duration(pttl) * time.Millisecond
	}
	q, _ := res[2].AsInt64()
	st.Waiters = int(q)
	if tok, err := res[3].ToString(); err == nil {
		st.Token, _ = strconv.ParseUint(tok, 10, 64)
	}
	return st, nil
}

// ForceUnlock deletes the lock whoever holds it and publishes Redisson's
// unlock message, as Java's forceUnlock. It reports whether the lock was
// held. A Go holder's Lease reports redisync.ErrExpired: about one round trip later
// when its Client's LossDetection is DetectOnChange, at its next renewal
// otherwise; a Java holder learns it at its next renewal or unlock. A key
// of another layout is left alone: redisync.ErrWrongType. For operators: a holder
// that is alive loses mutual exclusion.
func (l *Lock) ForceUnlock(ctx context.Context) (bool, error) {
	return found(runOn(ctx, l, redissonForceScript, "force unlock Redisson lock", func(how string) ([]string, []string) {
		return []string{l.keys.Lock, l.keys.Channel}, []string{how}
	}))
}
