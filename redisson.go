package redisync

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// Locks in Redisson's layout (Redisson 3.x, the Java client): a Go service
// and a Java service (or a Node.js one on node-redisson) share one lock by
// name. They live on the Client, as its other primitives do, because they
// are held through the Client's own machinery: its watchdog renews them,
// its tracking reports them lost, its Close releases them, and a Lease of
// one is a Lease like any other.
//
// The keys, channels and messages are Redisson's, as its scripts write and
// read them; the scripts that do so here are this library's own:
//
//	RLock         hash NAME: field UUID:THREADID -> hold count, expiry = lease
//	              channel redisson_lock__channel:{NAME}, message "0"
//	              unlock latch redisson_unlock_latch:{NAME}:REQUESTID
//	RFencedLock   as RLock, and the counter redisson_lock_token:{NAME}
//
// Java wraps NAME in {...} in the names of channels and auxiliary keys
// unless NAME contains a '{' (RedissonObject.prefixName), and so does this
// library. On Cluster a NAME that contains '{' without a hash tag
// ("a{b") puts the lock and its channel in different slots: Redisson
// fails on it there, and this library rejects it (ErrInvalidArgument).

// RedissonPubSub is how the Redisson locks of a Client publish their
// messages and listen for them. It must match what the Redisson clients
// sharing the locks use: Redisson 3.22.0 and later, on Redis Cluster 7.0
// or newer, use sharded pub/sub (SPUBLISH, SSUBSCRIBE) unless their
// ClusterServersConfig.shardedSubscriptionMode (3.29.0 and later) is OFF;
// they use classic pub/sub on standalone Redis, Sentinel, older Clusters,
// and in older versions. Waiters listen on both kinds on Cluster whatever
// the mode, so a publisher of either kind wakes them; the waiters of a
// Client share one subscription per channel and kind.
type RedissonPubSub int

const (
	// RedissonPubSubAuto is Redisson's default: sharded on a Cluster whose
	// servers have sharded pub/sub, classic everywhere else.
	RedissonPubSubAuto RedissonPubSub = iota
	// RedissonPubSubClassic publishes with PUBLISH: Redisson before 3.22.0,
	// shardedSubscriptionMode OFF, and node-redisson.
	RedissonPubSubClassic
	// RedissonPubSubSharded publishes with SPUBLISH (Redis 7.0 or newer):
	// shardedSubscriptionMode ON.
	RedissonPubSubSharded
	// RedissonPubSubBoth publishes every message both ways, for fleets that
	// mix the two (Java on sharded and Node.js on classic pub/sub).
	RedissonPubSubBoth
)

// RedissonOption configures a Redisson lock handle.
type RedissonOption func(*redissonConfig)

type redissonConfig struct {
	lease  time.Duration // 0: renewed by the watchdog
	pubsub RedissonPubSub
	latch  time.Duration
	// fairWait is RFairLock's wait of a queued waiter.
	fairWait time.Duration
	bad      error
}

// defaultRedissonLatch is how long an unlock latch lives: Redisson's own
// default, (timeout 3 s + retryDelay of up to 2 s) × 4 retryAttempts.
const defaultRedissonLatch = 20 * time.Second

// WithRedissonLeaseTime gives every acquisition a lease of d that the
// watchdog does not renew, as Java's lock(leaseTime, unit) does: the lock
// expires d after it was taken unless released first, and the Lease
// reports ErrExpired a tenth of d before that. Without it the lease is the
// Client's watchdog lease (WithWatchdogLease, Redisson's
// lockWatchdogTimeout), renewed every third of it. d must be at least a
// millisecond.
func WithRedissonLeaseTime(d time.Duration) RedissonOption {
	return func(c *redissonConfig) {
		c.lease = d
		if d < time.Millisecond {
			c.bad = fmt.Errorf("%w: Redisson lease time %v is under a millisecond", ErrInvalidArgument, d)
		}
	}
}

// WithRedissonPubSub sets how the lock publishes its messages (default
// RedissonPubSubAuto). A mode that no other client of the lock listens on
// delays their waiters: Go waiters until their Client's next presence pass
// (a second apart by default), Redisson's until the holder's remaining
// lease runs out.
func WithRedissonPubSub(m RedissonPubSub) RedissonOption {
	return func(c *redissonConfig) {
		c.pubsub = m
		if m < RedissonPubSubAuto || m > RedissonPubSubBoth {
			c.bad = fmt.Errorf("%w: unknown RedissonPubSub %d", ErrInvalidArgument, int(m))
		}
	}
}

// WithRedissonUnlockLatch sets how long the unlock latch of an Unlock lives
// (default 20 s, Redisson's): a retry of Unlock (after an error whose
// outcome is unknown) within that time gets the first attempt's result.
// d must be at least a millisecond.
func WithRedissonUnlockLatch(d time.Duration) RedissonOption {
	return func(c *redissonConfig) {
		c.latch = d
		if d < time.Millisecond {
			c.bad = fmt.Errorf("%w: Redisson unlock latch %v is under a millisecond", ErrInvalidArgument, d)
		}
	}
}

// newRedissonConfig applies opts and checks the handle's Client and name.
func newRedissonConfig(c *Client, name string, opts []RedissonOption) (redissonConfig, error) {
	cfg := redissonConfig{latch: defaultRedissonLatch, fairWait: defaultRedissonFairWait}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case c.invalid() != nil:
		return cfg, c.invalid()
	case validName(name) != nil:
		return cfg, validName(name)
	case cfg.bad != nil:
		return cfg, cfg.bad
	case c.cluster && strings.Contains(name, "{") && !hasHashTag(name):
		return cfg, fmt.Errorf("%w: Redisson name %q contains '{' but no hash tag: its lock and channel would be in different Cluster slots", ErrInvalidArgument, name)
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
// one name, in a lockKeys: lock is the hash, channel the unlock channel,
// queue and waiters the fair lock's list and zset.
func redissonLockKeys(name string) lockKeys {
	return lockKeys{
		lock:    name,
		channel: redissonPrefixName("redisson_lock__channel", name),
		queue:   redissonPrefixName("redisson_lock_queue", name),
		waiters: redissonPrefixName("redisson_lock_timeout", name),
	}
}

func redissonTokenKey(name string) string { return redissonPrefixName("redisson_lock_token", name) }

func redissonLatchKey(name, request string) string {
	return redissonPrefixName("redisson_unlock_latch", name) + ":" + request
}

// The scripts of the Redisson layouts.
var (
	redissonLockScript    = newScript("redisson_prelude", "redisson_lock")
	redissonUnlockScript  = newScript("redisson_prelude", "redisson_unlock")
	redissonReleaseScript = newScript("redisson_prelude", "redisson_release")
	redissonRenewScript   = newScript("redisson_renew")
	redissonForceScript   = newScript("redisson_prelude", "redisson_force")
)

// redissonHolderProbe reads a holder of the Redisson lock hash name (its
// one field for an RLock or RFairLock), none while it is free: what the
// presence pass reads for its waiters (see subscription.follow).
func redissonHolderProbe(name string) probe {
	return func(rc rueidis.Client) rueidis.Completed { return rc.B().Hrandfield().Key(name).Build() }
}

// redissonSharded reports whether RedissonPubSubAuto means sharded pub/sub
// on c: on a Cluster whose servers answer PUBSUB SHARDNUMSUB, as Redisson
// finds out.
func (c *Client) redissonSharded(ctx context.Context) (bool, error) {
	if !c.cluster {
		return false, nil
	}
	if v := c.redissonShards.Load(); v != 0 {
		return v == 2, nil
	}
	err := c.rc.Do(ctx, c.rc.B().PubsubShardnumsub().Build()).Error()
	if err != nil && !isRedisReply(err) {
		return false, redisErr("PUBSUB SHARDNUMSUB", err)
	}
	v := int32(1)
	if err == nil {
		v = 2
	}
	c.redissonShards.Store(v)
	return v == 2, nil
}

// redissonPubSub returns how to publish ('c' classic, 's' sharded, 'b'
// both) and which kinds to listen on.
func (c *Client) redissonPubSub(ctx context.Context, m RedissonPubSub) (how string, classic, sharded bool, err error) {
	has, err := c.redissonSharded(ctx)
	if err != nil {
		return "", false, false, err
	}
	switch m {
	case RedissonPubSubClassic:
		how = "c"
	case RedissonPubSubSharded:
		how = "s"
	case RedissonPubSubBoth:
		how = "b"
	default:
		how = "c"
		if has {
			how = "s"
		}
	}
	return how, true, has || how != "c", nil
}

// redissonRequestID is a fresh request id, as Redisson's generateId: 16
// random bytes in hex.
func redissonRequestID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// RedissonLock is a lock in the layout of Redisson's RLock (and, made by
// RedissonFencedLock, RFencedLock). It is a cheap handle: make one per use
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
// (Token is 0: use RedissonFencedLock); a forced unlock is reported as
// ErrExpired, not ErrForceUnlocked; a message lost costs the waiters of
// this Client up to their Client's next presence pass (a second apart by
// default), which reads the lock for them all, and Java waiters up to the
// holder's remaining lease. Mutual exclusion,
// the watchdog (a third of the lease), loss detection and the unlock latch
// are as in Redisson.
type RedissonLock struct {
	c      *Client
	name   string
	keys   lockKeys
	cfg    redissonConfig
	fenced bool
	err    error
}

// RedissonLock returns the Redisson RLock of the given name: the hash NAME,
// as Java's redisson.getLock(NAME). An invalid name or option is reported
// by every method, as ErrInvalidArgument.
func (c *Client) RedissonLock(name string, opts ...RedissonOption) *RedissonLock {
	l := &RedissonLock{c: c, name: name, keys: redissonLockKeys(name)}
	l.cfg, l.err = newRedissonConfig(c, name, opts)
	return l
}

// RedissonFencedLock returns the Redisson RFencedLock of the given name, as
// Java's redisson.getFencedLock(NAME): an RLock whose every acquisition,
// re-entries included, counts the token redisson_lock_token:{NAME} up by
// one. A Lease's Token is the token of the acquisition that made its
// ownership (re-entries share it, as they share the lock), so it means the
// same as Java's lockAndGetToken: pass it to the resource the lock guards,
// which rejects tokens lower than the highest it has seen. The counter
// never expires, as in Redisson.
func (c *Client) RedissonFencedLock(name string, opts ...RedissonOption) *RedissonLock {
	l := c.RedissonLock(name, opts...)
	l.fenced = true
	return l
}

// Name returns the lock's name.
func (l *RedissonLock) Name() string {
	if l == nil {
		return ""
	}
	return l.name
}

func (l *RedissonLock) check(ctx context.Context) error {
	if l == nil {
		return fmt.Errorf("%w: nil RedissonLock", ErrInvalidArgument)
	}
	return checkHandle("RedissonLock", l.c, l.err, ctx)
}

func (l *RedissonLock) spans() []*Client { return []*Client{l.c} }

// Lock acquires the lock, waiting as long as ctx allows: for Redisson's
// unlock message on the lock's channel, which the Client's waiters share
// one subscription to, and looking again when the holder's lease runs out
// or the Client's presence pass (a second apart by default) finds the lock
// free or taken by another holder, whatever messages were lost.
//
// It returns ctx.Err() when ctx ends first, and ErrClosed when the Client
// is closed. Connection errors do not end the wait: Lock retries them with
// backoff until ctx ends, then returns ctx's error wrapping the last of
// them. Errors Redis replies with are returned at once: ErrWrongType when
// the name holds something else than a Redisson lock (a string, a Redisson
// read-write lock, a fair lock with queued waiters). Whenever Lock returns
// an error nothing is held.
func (l *RedissonLock) Lock(ctx context.Context) (*Lease, error) { return lockHandle(ctx, l, false) }

// TryLock makes a single attempt. It returns ErrLocked when another owner
// holds the lock, ErrWrongType as Lock does, and any error from Redis or
// the connection at once.
func (l *RedissonLock) TryLock(ctx context.Context) (*Lease, error) { return lockHandle(ctx, l, true) }

// Acquire acquires the lock in the background and delivers one Lease on
// the returned channel, then closes it, as Mutex.Acquire does: the Lease
// reports failure through Err (ctx's error, ErrClosed, ErrWrongType, a
// Redis error), so check Err first; cancel ctx to give up, and a Lease not
// yet received when ctx ends is released.
func (l *RedissonLock) Acquire(ctx context.Context) <-chan *Lease { return acquireHandle(ctx, l) }

func (l *RedissonLock) acquire(ctx context.Context, try bool) (*Lease, error) {
	c := l.c
	how, classic, sharded, err := c.redissonPubSub(ctx, l.cfg.pubsub)
	if err != nil {
		return nil, err
	}
	kind := redissonLockKinds[how]
	parent := leaseFrom(ctx, c, l.keys)
	owner, lease, watchdog := c.newOwner(), l.cfg.lease, l.cfg.lease == 0
	if watchdog {
		lease = c.cfg.watchdogLease
	}
	if parent != nil {
		owner, lease, watchdog = parent.h.owner, parent.h.lease, parent.h.watchdog
	}
	fenced := "0"
	if l.fenced {
		fenced = "1"
	}
	keys := []string{l.keys.lock, l.keys.queue, redissonTokenKey(l.name)}
	args := []string{strconv.FormatInt(lease.Milliseconds(), 10), owner, fenced, reentryMode(parent)}
	undo := func(ctx context.Context) {
		if parent != nil {
			// A re-entry whose outcome is unknown: the outer lease's last
			// Unlock releases every hold (see redissonAttempt).
			return
		}
		if err := redissonReleaseScript.exec(ctx, c.rc, []string{l.keys.lock, l.keys.channel}, []string{owner, how}).Error(); err != nil {
			c.log.Warn("redisync: could not undo a Redisson lock acquisition whose outcome is unknown; if it took the lock, that expires with its lease", "key", l.keys.lock, "err", err)
		}
	}
	w := redissonWait{
		c: c, channel: l.keys.channel, classic: classic, sharded: sharded,
		probe: redissonHolderProbe(l.name), primitive: kind.primitive, name: l.name,
		busy: errorf("%w: Redisson lock %s", ErrLocked, l.name),
		attempt: func(ctx context.Context) (*Lease, time.Duration, error) {
			sent := time.Now()
			res, done, err := c.redissonAttempt(ctx, parent, redissonLockScript, keys, args, undo)
			defer done()
			if err != nil {
				return nil, 0, redisErr("acquire Redisson lock "+l.name, err)
			}
			if len(res) < 2 {
				return nil, 0, fmt.Errorf("redisync: acquire Redisson lock: unexpected reply of %d elements", len(res))
			}
			if err := redissonRefused(parent, res); err != nil {
				return nil, 0, err
			}
			if ok, _ := res[0].AsInt64(); ok != 1 {
				pttl, _ := res[1].AsInt64()
				return nil, time.Duration(pttl) * time.Millisecond, nil
			}
			token, _ := res[2].AsInt64()
			gl, err := c.grant(ctx, grant{kind: kind, name: l.name, keys: l.keys, key: l.keys.lock, parent: parent, owner: owner, hold: redissonHold(l.cfg.latch), token: token, lease: lease, watchdog: watchdog, sent: sent})
			if err != nil {
				// The outer lease ended meanwhile: give the hold back.
				l.releaseHold(owner, how, lease)
			}
			return gl, 0, err
		},
		undo: undo,
	}
	return w.run(ctx, try)
}

// releaseHold gives back one hold taken for a lease that could not be made.
func (l *RedissonLock) releaseHold(owner, how string, lease time.Duration) {
	ctx, cancel := detached(context.Background())
	defer cancel()
	redissonUnlockScript.exec(ctx, l.c.rc, []string{l.keys.lock, l.keys.channel, redissonLatchKey(l.name, redissonRequestID())},
		[]string{strconv.FormatInt(lease.Milliseconds(), 10), owner, "1", how, "0"})
}

// redissonLockKinds are the lease kinds of RLock holders, by publishing
// mode.
var redissonLockKinds = map[string]*leaseKind{
	"c": newRedissonLockKind("c"),
	"s": newRedissonLockKind("s"),
	"b": newRedissonLockKind("b"),
}

func newRedissonLockKind(how string) *leaseKind {
	return &leaseKind{
		primitive:  "redisson_lock",
		tracked:    true,
		ownerField: true,
		renew:      redissonRenewScript,
		release:    redissonReleaseScript,
		releaseAll: func(h *holder) rueidis.LuaExec {
			return rueidis.LuaExec{Keys: []string{h.key, h.keys.channel}, Args: []string{h.owner, how}}
		},
		unlock: func(ctx context.Context, h *holder, hold string) (releaseState, error) {
			return redissonUnlock(ctx, h, hold, how)
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
func redissonUnlock(ctx context.Context, h *holder, hold, how string) (releaseState, error) {
	return redissonRelease(ctx, h, hold, redissonUnlockScript, "unlock Redisson lock", func(req string) ([]string, string) {
		latch := redissonLatchKey(h.name, req)
		return []string{h.key, h.keys.channel, latch}, latch
	}, how)
}

// redissonRelease releases one hold of a Redisson lock holder ("" for every
// hold) with the unlock script s: the hold's request id names the unlock
// latch, so a retried Unlock of one Lease gets the first attempt's result,
// as in Redisson. The holder's last Lease releases every hold while no
// re-entry is on its way, so that a re-entry whose outcome was unknown
// never keeps the lock. keys gives the
// script's keys for a request id, and the latch's key among them; the
// script's arguments are the lease (ms), the owner, the latch's life (ms),
// how to publish, '1' to release every hold, then extra. what names the
// operation in errors.
func redissonRelease(ctx context.Context, h *holder, hold string, s script, what string,
	keys func(req string) ([]string, string), how string, extra ...string) (releaseState, error) {
	c := h.c
	// A re-entry's hold is counted in Redis before its Lease is in
	// h.leases: while one is on its way (entering), the last Lease
	// releases only its own hold, and the last re-entry to end releases
	// what is left (endReentry). While a release of every hold is on its
	// way (wiping), no re-entry starts (beginReentry); one that had no
	// answer keeps them out until a release answers (wipeUnsure). The other
	// Leases are counted by their holds: the Lease released may have left
	// h.leases already (one given back, see giveBack).
	h.mu.Lock()
	others := 0
	for l := range h.leases {
		if l.hold != hold {
			others++
		}
	}
	all := hold == "" || (others == 0 && h.entering == 0)
	if all {
		h.wiping++
	}
	h.mu.Unlock()
	if hold == "" {
		hold = redissonHold(defaultRedissonLatch)
	}
	req, latchMs, _ := strings.Cut(hold, "/")
	flag := "0"
	if all {
		flag = "1"
	}
	ks, latch := keys(req)
	args := append([]string{strconv.FormatInt(h.lease.Milliseconds(), 10), h.owner, latchMs, how, flag}, extra...)
	n, err := s.exec(ctx, c.rc, ks, args).AsInt64()
	answered := err == nil || rueidis.IsRedisNil(err)
	if all {
		h.mu.Lock()
		h.wiping--
		// A release with no answer may still run: until one answers, no
		// re-entry starts.
		h.wipeUnsure = !answered
		h.mu.Unlock()
	}
	if !answered {
		return notHeld, redisErr(what+" "+h.name, err)
	}
	// The result is known: the latch has done its work.
	c.rc.Do(ctx, c.rc.B().Del().Key(latch).Build())
	switch {
	case err != nil:
		return notHeld, nil
	case n == 1:
		return freed, nil
	}
	return stillHeld, nil
}

// reentryMode is the argument that makes a Redisson acquire script a
// re-entry of parent ("r": one more hold of the parent's ownership, only
// while it holds; never a free lock taken, nor a place in a queue), ""
// when parent is nil.
func reentryMode(parent *Lease) string {
	if parent == nil {
		return ""
	}
	return "r"
}

// redissonAttempt runs one acquire script of a Redisson lock with
// execTaking (undo undoes a late reply of an acquisition that is no
// re-entry). A re-entry of parent is counted on the parent's holder while
// it is on its way (beginReentry): its hold is counted in Redis before its
// Lease is, and a release of every hold must not take it. done ends the
// count once the caller applied the outcome (the Lease made, or not); for
// a reply that comes late, it ends when the reply came, or never will.
func (c *Client) redissonAttempt(ctx context.Context, parent *Lease, s script, keys, args []string, undo func(context.Context)) (res []rueidis.RedisMessage, done func(), err error) {
	if parent == nil {
		res, err = c.execTaking(ctx, s, keys, args, undo).ToArray()
		return res, func() {}, err
	}
	h := parent.h
	if err := h.beginReentry(); err != nil {
		return nil, func() {}, err
	}
	var once sync.Once
	end := func(ctx context.Context) { once.Do(func() { h.endReentry(ctx) }) }
	res, err = c.execTaking(ctx, s, keys, args, end).ToArray()
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// Given up on while on its way: execTaking runs end once it is
		// settled.
		return nil, func() {}, err
	}
	return res, func() {
		dctx, cancel := detached(ctx)
		defer cancel()
		end(dctx)
	}, err
}

// redissonRefused is the error of a re-entry of parent that a Redisson
// acquire script refused ({-1, why}): the parent's loss; nil otherwise.
func redissonRefused(parent *Lease, res []rueidis.RedisMessage) error {
	if flag, _ := res[0].AsInt64(); flag != -1 {
		return nil
	}
	why, _ := res[1].AsInt64()
	err := error(&reentryRefusal{reason: refusedStateErr(why)})
	if parent == nil {
		return fmt.Errorf("redisync: acquire: a re-entry refused without a parent: %w", err)
	}
	return refusedReentry(parent, err)
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

// RedissonLockState is a snapshot of a lock in Redisson's RLock layout.
type RedissonLockState struct {
	// Locked tells whether the hash exists.
	Locked bool
	// Holders are the hash's fields, UUID:THREADID, with their hold
	// counts: one holder for an RLock.
	Holders []RedissonHolder
	// TTL is the remaining lease; negative when the key has no expiry.
	TTL time.Duration
	// Waiters is the length of the fair lock's queue (0 for an RLock).
	Waiters int
	// Token is the last fencing token an RFencedLock of the name gave out.
	Token uint64
}

// RedissonHolder is one field of a Redisson lock hash.
type RedissonHolder struct {
	// Owner is the field: Redisson's UUID:THREADID (this library's
	// Client ID and a number for a Go holder).
	Owner string
	// Holds is the hold count.
	Holds int
}

// ClientID returns the UUID part of the owner (the Redisson client's id, or
// the Go Client's ID), also for a read-write lock's writer field
// UUID:THREADID:write.
func (h RedissonHolder) ClientID() string {
	return clientIDOf(strings.TrimSuffix(h.Owner, redissonWriteSuffix))
}

// Inspect reads the lock's state (two round trips when it is held). A key
// of another layout is ErrWrongType; an error from Redis or the connection,
// or ctx's end, is returned as it comes. It changes nothing.
func (l *RedissonLock) Inspect(ctx context.Context) (RedissonLockState, error) {
	if err := l.check(ctx); err != nil {
		return RedissonLockState{}, err
	}
	return InspectRedissonLock(ctx, l.c.rc, l.name)
}

// InspectRedissonLock reads the state of the Redisson lock (RLock,
// RFencedLock or RFairLock) of the given name through rc: what `redisync
// inspect` shows. A key of another layout is ErrWrongType; a name with no
// lock is a state with Locked false.
func InspectRedissonLock(ctx context.Context, rc rueidis.Client, name string) (RedissonLockState, error) {
	var st RedissonLockState
	if rc == nil || ctx == nil || name == "" {
		return st, fmt.Errorf("%w: nil client or context, or empty name", ErrInvalidArgument)
	}
	keys := redissonLockKeys(name)
	res := rc.DoMulti(ctx,
		rc.B().Type().Key(name).Build(),
		rc.B().Pttl().Key(name).Build(),
		rc.B().Llen().Key(keys.queue).Build(),
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
			return st, fmt.Errorf("%w: %s holds a Redisson read-write lock", ErrWrongType, name)
		}
		for f, v := range all {
			n, _ := strconv.Atoi(v)
			st.Holders = append(st.Holders, RedissonHolder{Owner: f, Holds: n})
		}
		st.Locked = len(all) > 0
	default:
		return st, fmt.Errorf("%w: %s holds a %s, not a Redisson lock", ErrWrongType, name, t)
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
// held. A Go holder's Lease reports ErrExpired: about one round trip later
// when its Client's LossDetection is DetectOnChange, at its next renewal
// otherwise; a Java holder learns it at its next renewal or unlock. A key
// of another layout is left alone: ErrWrongType. For operators: a holder
// that is alive loses mutual exclusion.
func (l *RedissonLock) ForceUnlock(ctx context.Context) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, err
	}
	how, _, _, err := l.c.redissonPubSub(ctx, l.cfg.pubsub)
	if err != nil {
		return false, err
	}
	return l.c.runFound(ctx, redissonForceScript, "force unlock Redisson lock "+l.name, []string{l.keys.lock, l.keys.channel}, []string{how})
}
