package redisync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// LockOption configures a lock made by a Client. Each lock takes the
// options its doc lists and rejects the others, as ErrInvalidArgument.
type LockOption func(*lockConfig)

type lockConfig struct {
	fixedLease   time.Duration // 0: renewed by the watchdog
	renewedLease time.Duration // 0: the Client's watchdog lease
	waiterExpiry time.Duration // how long a waiter's place outlives its last visit
	// localPasses and localWithin are the budget of local passes of a
	// Mutex (WithLocalPasses); 0 passes: none.
	localPasses int
	localWithin time.Duration
	given       lockOptions // the options given
}

// lockOptions is a set of LockOptions.
type lockOptions uint8

const (
	optFixedLease lockOptions = 1 << iota
	optWaiterExpiry
	optRenewedLease
	optLocalPasses
)

// lockOptionNames name the LockOptions in errors, in the order of their
// bits.
var lockOptionNames = []string{"WithFixedLease", "WithWaiterExpiry", "WithRenewedLease", "WithLocalPasses"}

// newLockConfig applies opts over base and checks what every lock handle
// checks: a Client, a name, durations of at least a millisecond, and that
// opts are among the options the lock, kind, accepts.
func newLockConfig(c *Client, kind, name string, base lockConfig, accepts lockOptions, opts []LockOption) (lockConfig, error) {
	for _, o := range opts {
		if o != nil {
			o(&base)
		}
	}
	switch {
	case c.invalid() != nil:
		return base, c.invalid()
	case validName(name) != nil:
		return base, validName(name)
	case base.fixedLease < 0:
		return base, fmt.Errorf("%w: fixed lease under a millisecond", ErrInvalidArgument)
	case base.renewedLease < 0:
		return base, fmt.Errorf("%w: renewed lease under a millisecond", ErrInvalidArgument)
	case base.given&(optFixedLease|optRenewedLease) == optFixedLease|optRenewedLease:
		return base, fmt.Errorf("%w: WithFixedLease and WithRenewedLease exclude each other", ErrInvalidArgument)
	case base.waiterExpiry < 0:
		return base, fmt.Errorf("%w: waiter expiry under a millisecond", ErrInvalidArgument)
	case base.localPasses < 0 || base.localPasses > maxLocalPasses:
		return base, fmt.Errorf("%w: local passes outside 0..%d", ErrInvalidArgument, maxLocalPasses)
	case base.localWithin < 0 || (base.localPasses > 0 && base.localWithin == 0):
		return base, fmt.Errorf("%w: the time budget of local passes must be positive", ErrInvalidArgument)
	}
	return base, checkLockOptions(kind, accepts, opts)
}

// checkLockOptions reports the first of opts that a lock of kind does not
// accept.
func checkLockOptions(kind string, accepts lockOptions, opts []LockOption) error {
	var cfg lockConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	for i, name := range lockOptionNames {
		if bit := lockOptions(1) << i; cfg.given&bit != 0 && accepts&bit == 0 {
			return fmt.Errorf("%w: %s does not apply to a %s", ErrInvalidArgument, name, kind)
		}
	}
	return nil
}

// lease is the lease of a new ownership: the fixed lease, the lock's
// renewed lease, or the watchdog lease of c.
func (cfg lockConfig) lease(c *Client) time.Duration {
	switch {
	case cfg.fixedLease > 0:
		return cfg.fixedLease
	case cfg.renewedLease > 0:
		return cfg.renewedLease
	}
	return c.cfg.watchdogLease
}

// WithFixedLease gives every acquisition of the lock a lease of d that the
// watchdog does not renew: the lock expires d after it was acquired unless
// released first (or pushed further out by Lease.Extend), and the lease
// reports ErrExpired a tenth of d before that. An acquisition whose reply
// comes a third of d or more after it was sent renews the lease to d
// before it delivers it, and delivers nothing when the lock is no longer
// its own: a fixed lease too is delivered only with most of d ahead.
// Re-entering a held lock
// keeps the lease mode of the first acquisition and never shortens its
// remaining lease. d must be at least a millisecond, and WithRenewedLease
// cannot be given with it (ErrInvalidArgument).
func WithFixedLease(d time.Duration) LockOption {
	return func(c *lockConfig) {
		c.fixedLease, c.given = d, c.given|optFixedLease
		if d < time.Millisecond {
			c.fixedLease = -1
		}
	}
}

// WithRenewedLease gives every acquisition of the lock a lease of d that
// the Client's watchdog renews, in place of the Client's watchdog lease
// (WithWatchdogLease): renewed every third of d, reported lost
// (ErrConnectionLost) when no renewal has succeeded for nine tenths of d,
// and held until Unlock or loss. d is also what a crash of the holder costs
// the next one: a holder that dies without releasing keeps the lock until d
// runs out. A short d lets another process take over soon after a crash, at
// the price of a renewal every d/3 per held lock, and of a loss
// (ErrConnectionLost) whenever Redis does not answer for 0.9·d; a Client
// with many such locks renews each at its own pace. Re-entering a held lock
// keeps the lease of the first acquisition. d must be at least a
// millisecond, and WithFixedLease cannot be given with it
// (ErrInvalidArgument).
func WithRenewedLease(d time.Duration) LockOption {
	return func(c *lockConfig) {
		c.renewedLease, c.given = d, c.given|optRenewedLease
		if d < time.Millisecond {
			c.renewedLease = -1
		}
	}
}

// WithLocalPasses sets the budget of local passes of a Mutex: when a
// goroutine unlocks it and another goroutine of the same Client waits for
// it, the lock passes to that goroutine without a command to Redis, up to
// passes times and for at most within after the Client took it in Redis,
// or got a budget there. Then the next Unlock goes to Redis: when nobody
// waits there, the Client keeps the lock with a new budget (new fencing
// tokens, one round trip); when a waiter of another Client (or a Group)
// does, the lock is released to it, and the Client's goroutines queue
// behind. So a waiter of another Client waits at most within longer (and
// the critical section that runs when it ends) than without local
// passes. Keeping the lock is a release that Redis turns into a new
// budget, with a release's guarantees: it waits for the replicas
// WithReplicaAck asks for; when its reply is lost, or comes after
// Unlock's ctx ended, Unlock releases the lock (given half a second past
// ctx's end); and a reply that comes after the lease was lost hands out
// no token. In these cases, and when fewer replicas acknowledge, nothing
// is passed on: the lock is released as without local passes, and the
// Client's goroutines take it in Redis.
//
// A pass is delivered only while the Client can vouch for its hold: within
// counts from when the command whose reply last confirmed the hold in Redis
// (the acquisition, or the new budget) was sent (so a within shorter than
// the round trip to Redis leaves no time for passes), and an ownership that
// was ever re-entered (a Group or Quorum re-entering it through a lease
// included) is not passed on again. With DetectOnChange, a change of the
// lock's key that Redis reports voids the budget, and the next Unlock asks
// Redis for a new one. What remains is a change the Client has not heard
// of yet: a pass may be delivered while the lock was force-unlocked or
// lost, and even taken by another Client (whose token is greater: fencing
// refuses the pass's writes), until the change's invalidation arrives,
// about one round trip after it, and at most within after that command was
// sent, when the invalidation came while that command was on its way.
// A Client whose LossDetection is DetectOnRenewal hears of no change
// between two replies of Redis, so it does not pass locks on locally
// unless given this option, and then confirms every pass in Redis: the
// Unlock that passes the lock on asks Redis to keep it (one round trip,
// which checks that the Client still holds the lock, nobody waits there,
// and reserves a token above every one handed out), and the pass follows
// its reply, within within of its sending; otherwise the lock is released.
//
// The default is DefaultLocalPasses within DefaultLocalPassWindow for a
// Client whose LossDetection is DetectOnChange, and no local passes
// otherwise. passes 0 turns local passes off: every hand-off goes through
// Redis, as a FairMutex's do. passes must be 0 to maxLocalPasses (1000),
// within positive unless passes is 0 (ErrInvalidArgument). A lock with a
// fixed lease (WithFixedLease) is never passed on locally.
func WithLocalPasses(passes int, within time.Duration) LockOption {
	return func(c *lockConfig) {
		c.localPasses, c.localWithin, c.given = passes, within, c.given|optLocalPasses
		if passes == 0 {
			c.localWithin = 0
		}
	}
}

// The default budget of local passes of a Mutex (WithLocalPasses) of a
// Client whose LossDetection is DetectOnChange: 64 passes, within 2ms of
// the Client's acquisition in Redis. A Client that detects losses on
// renewal has no local passes by default.
const (
	DefaultLocalPasses     = 64
	DefaultLocalPassWindow = 2 * time.Millisecond
)

// maxLocalPasses bounds the passes of WithLocalPasses: each acquisition in
// Redis made while other goroutines of the Client wait reserves that many
// fencing tokens, and tokens must grow slower than the server's clock in
// microseconds (see next_token in lua/lock.lua).
const maxLocalPasses = 1000

// Mutex is a reentrant distributed mutual-exclusion lock. It is a cheap
// handle: make one per use or share one, from many goroutines.
//
// Mutual exclusion holds between leases, not goroutines: a lease's Context
// carries ownership, and acquiring the Mutex with it (or a context derived
// from it) re-enters the lock: the hold count grows in Redis and each Unlock
// takes one hold back. A re-entry never waits: when Redis no longer has the
// lock held by the lease's ownership, it fails with the lease's loss (see
// Lease.Context). Any other acquisition waits until the lock is free.
//
// Waiting costs nothing while the lock is free: a free lock is taken in one
// round trip. A waiter takes a place in the lock's queue in Redis and
// subscribes to the lock's channel. A release hands the lock over to the
// first live waiter of the queue inside the release script and tells it
// with one message, whatever the number of waiters and clients: the new
// holder needs no round trip of its own. So a contended Mutex is granted in
// arrival order; it is not strictly fair only in that an acquisition that
// finds the lock free takes it, and that waiters with a fixed lease (and
// re-entries) are woken to take the lock themselves rather than handed it.
// A waiter's place lives as long as its Client renews one deadline per lock
// for all its waiters there, every third of WithWaiterExpiry: waiting costs
// per Client and lock, not per waiter. Since a crashed holder publishes
// nothing, the Client looks at the lock when the holder's lease runs out
// and wakes its waiters if it is free. A waiter whose Client died holds a
// lock handed over to it for the claim window at most (3s, or
// WithWaiterExpiry if shorter).
//
// Goroutines of one Client that want the same Mutex wait for it in the
// Client while one of them acquires it in Redis, and the lock passes from
// one of them to the next without a command to Redis, within a budget
// (WithLocalPasses): then the next Unlock gets a new budget in Redis if
// nobody waits there, and releases the lock otherwise, to the waiters of
// other Clients. Each goroutine's Lease keeps its own contract: a token
// greater than every earlier holder's (Redis reserved a block of tokens
// for the Client's passes, with its acquisition, the hand-over that gave
// it the lock, or a new budget, and another Client's next token comes
// after the block), Lost, Err and Context that report a loss of
// the Client's hold to the goroutine holding it, and an Unlock that passes
// the lock on, or releases it in Redis; a lease that passed the lock on is
// released (ErrReleased) and its Unlock never releases its successor's
// hold, also when called twice at once. Inspect, ForceUnlock and the command-line tool see the Client's
// ownership: its owner id, and the token of its acquisition in Redis. An
// ownership that was re-entered (by a Mutex, Group or Quorum acquisition
// with one of its leases' Context), and a lock with a fixed lease, are not passed
// on locally; nor, unless WithLocalPasses says so, are the locks of a
// Client that detects losses on renewal (see WithLocalPasses for when a
// pass is delivered).
type Mutex struct {
	c    *Client
	name string
	keys lockKeys
	cfg  lockConfig
	err  error // invalid name or option
	q    queuedLock
}

// Mutex returns the mutex with the given name. Any non-empty string is a
// valid name, binary included. A name with a Cluster hash tag of its own
// ("{user:7}:cart") keeps it, so locks can be placed in one slot. An invalid
// name or option is reported by every method, as ErrInvalidArgument.
func (c *Client) Mutex(name string, opts ...LockOption) *Mutex {
	m := &Mutex{c: c, name: name}
	base := lockConfig{waiterExpiry: defaultWaiterExpiry}
	if c.LossDetection() == DetectOnChange {
		// A Client that learns of changes only when it renews cannot vouch
		// for a hold between renewals: it passes locks on locally only when
		// asked to (WithLocalPasses).
		base.localPasses, base.localWithin = DefaultLocalPasses, DefaultLocalPassWindow
	}
	if m.cfg, m.err = newLockConfig(c, "Mutex", name, base, optFixedLease|optWaiterExpiry|optRenewedLease|optLocalPasses, opts); m.err == nil {
		m.keys = c.keysFor(name)
		m.q.init(c, mutexKind, name, m.keys, m.cfg, acquireScript)
	}
	return m
}

// Lock acquires the mutex, waiting as long as ctx allows.
//
// It returns, when ctx ends first, an error naming the mutex that matches
// both ctx.Err() and ErrLocked (see ErrLocked), and ErrClosed when the
// Client is closed. Connection errors do not end the wait: Lock retries them with
// backoff (up to a second apart) until ctx ends, then returns ctx's error
// wrapping the last of them. Errors Redis replies with (a key of the wrong
// type, a script error) are returned at once. Whenever Lock returns an
// error nothing stays held: if ctx ended while an attempt was on its way to
// Redis, Lock waits for its outcome and releases what it took (half a
// second at most for each) before returning; while Redis cannot be
// reached, the release goes on in the background (Close waits for it).
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) { return lockHandle(ctx, m, false) }

// TryLock makes a single attempt. It returns ErrLocked when another owner
// holds the mutex, and any error from Redis or the connection at once;
// after a connection error, whose attempt may have taken the lock before
// its reply was lost, it first gives back what the attempt may have taken
// (waiting for that half a second at most while Redis cannot be reached).
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) { return lockHandle(ctx, m, true) }

// Acquire acquires the mutex in the background and delivers one Lease on
// the returned channel, then closes it. Select on it together with other
// channels; to give up, cancel ctx.
//
// Receive the Lease, or end ctx: unlike golang.org/x/sync/semaphore's
// Acquire, calling Acquire as a statement does not wait, and the lock is
// taken and held until ctx ends (a Lease left unreceived for a second or
// more is logged at WARN when ctx ends and it is released).
//
// The Lease reports failure through Err (ctx's error, ErrClosed, a Redis
// error), never by a nil Lease. It is claimed by its first use (Err, Lost,
// Unlock, Context, Token): if ctx ends before that, the lock is released
// and the Lease reports ctx's error. So check Err first: nil means held.
func (m *Mutex) Acquire(ctx context.Context) <-chan *Lease { return acquireHandle(ctx, m) }

// acquire runs the acquisition loop: through the Client's goroutines that
// want the lock too (local passes) when the lock takes them, in Redis
// otherwise.
func (m *Mutex) acquire(ctx context.Context, try bool) (*Lease, error) {
	if try || !m.passesLocally() || m.q.leaseFrom(ctx) != nil {
		return m.queued().acquire(ctx, try)
	}
	// A wait for a local pass ends as a wait in the queue does, naming the
	// lease of the Client that holds the lock meanwhile.
	l, err := m.c.acquireLocally(ctx, m)
	if err != nil {
		err = waitEnded(ctx, err, mutexKind.primitive, m.name, m.c.localHolder(m.keys.lock), ErrLocked)
	}
	return l, err
}

// passesLocally reports whether the mutex is passed on locally: a budget
// of local passes, and a lease the watchdog renews.
func (m *Mutex) passesLocally() bool {
	return m.cfg.localPasses > 0 && m.cfg.fixedLease == 0
}

// queued is the mutex as a lock with a queue.
func (m *Mutex) queued() *queuedLock { return &m.q }

// queuedLock is what a Mutex and a FairMutex share: a lock hash, a queue of
// waiters, and an acquire script with the keys and arguments of
// acquire.lua.
type queuedLock struct {
	c      *Client
	kind   *leaseKind
	name   string
	keys   lockKeys
	cfg    lockConfig
	script script
	// words, made at the first acquisition in Redis (wordsOf).
	words atomic.Pointer[lockWords]
}

// lockWords are what every acquisition of a queuedLock sends or looks up
// the same way, made once per lock rather than at each acquisition: they
// follow from the lock's keys and configuration and the Client's, which do
// not change. They are made at the lock's first acquisition in Redis, not
// with the lock, so that a Mutex made for one Lock that its Client passes
// on locally (c.Mutex(name).Lock(ctx)) makes none. A re-entry makes its
// own arguments (its lease is its parent's, and it is not handed over:
// acquireArgs).
type lockWords struct {
	lease time.Duration // cfg.lease(c)
	// lease, waiter expiry and hand-over lease (handOverLease without a
	// parent) as script arguments.
	leaseMs, expiryMs, shortMs string
	short                      time.Duration
	// listen is the Client's own channel of the lock (waiterChannel).
	listen string
	// leaseKey is the key under which a context carries a lease of the
	// lock (ctxKey), boxed once.
	leaseKey any
	// keys are the acquire script's keys (acquire.lua), never written to.
	keys []string
}

// init makes q the queuedLock of a Mutex or FairMutex.
func (q *queuedLock) init(c *Client, kind *leaseKind, name string, keys lockKeys, cfg lockConfig, s script) {
	q.c, q.kind, q.name, q.keys, q.cfg, q.script = c, kind, name, keys, cfg, s
}

// wordsOf returns the lock's words, made at the first call. Two first
// calls at once make the same words, and either is kept.
func (q *queuedLock) wordsOf() *lockWords {
	if w := q.words.Load(); w != nil {
		return w
	}
	c, keys := q.c, q.keys
	lease := q.cfg.lease(c)
	short := handOverLease(c, lease, q.cfg, nil)
	w := &lockWords{
		lease: lease, short: short,
		leaseMs: strconv.FormatInt(lease.Milliseconds(), 10), expiryMs: strconv.FormatInt(q.cfg.waiterExpiry.Milliseconds(), 10), shortMs: msArg(short),
		listen: waiterChannel(keys.channel, c.id), leaseKey: ctxKey{c, keys.lock},
		keys: []string{keys.lock, keys.queue, keys.waiters},
	}
	q.words.Store(w)
	return w
}

// leaseFrom is leaseFrom of the lock, with its boxed key once its words
// are made.
func (q *queuedLock) leaseFrom(ctx context.Context) *Lease {
	if w := q.words.Load(); w != nil {
		return leaseFromKey(ctx, w.leaseKey)
	}
	return leaseFrom(ctx, q.c, q.keys)
}

// acquire runs the acquisition loop.
func (q *queuedLock) acquire(ctx context.Context, try bool) (*Lease, error) {
	l, _, err := q.acquireReserving(ctx, try, nil)
	return l, err
}

// acquireReserving runs the acquisition loop; when reserve is not nil,
// each attempt asks the script to reserve the number of tokens it returns
// after the token of a lock it takes free or that a release hands over to
// it, and reserved is what was reserved for the lease returned.
func (q *queuedLock) acquireReserving(ctx context.Context, try bool, reserve func() int) (l *Lease, reserved int, err error) {
	c := q.c
	w := q.wordsOf()
	qa := q.newAcquisition(ctx, try, w)
	qa.reserve = reserve
	a := acquisition{
		c: c, primitive: q.kind.primitive, name: q.name,
		channel: q.keys.channel, key: q.keys.lock, busy: ErrLocked, target: qa.waiter, listenOn: w.listen,
		attempt: qa.attempt,
		holder:  func() string { return qa.holder },
		granted: qa.handedOver,
		undo:    func(ctx context.Context) { q.releaseAbandoned(ctx, qa.owner, qa.hold) },
		leave:   qa.leave,
	}
	l, err = a.run(ctx, try)
	if qa.joined {
		c.presence.leave(q.keys)
	}
	if l != nil && l.h.token == uint64(qa.tookToken) {
		reserved = qa.reserved
	}
	return l, reserved, err
}

// queuedAcquisition is one acquisition of a queuedLock: whose it is, the
// acquire script's arguments (acquire.lua), and what its attempts learned.
type queuedAcquisition struct {
	q      *queuedLock
	parent *Lease // the lease re-entered, or nil
	owner  string
	hold   string
	// waiter names the place in the queue; a re-entry, which shares its
	// owner with the parent, gets one of its own.
	waiter   string
	lease    time.Duration
	short    time.Duration // the lease a release hands the lock over with
	args     []string
	joined   bool      // counted by the Client's presence in the queue
	lastSent time.Time // when the last attempt was sent
	// What the last attempt that found the lock taken saw: the last token
	// handed out, and the server's clock in ms (0 when not known), and the
	// holder's owner id ("" when not known), for the error of a wait that
	// ends.
	seen, seenAt int64
	holder       string
	// reserve, when not nil, is how many tokens an attempt reserves for
	// local passes; reserved is what the attempt that took the lock with
	// tookToken reserved.
	reserve   func() int
	reserved  int
	tookToken int64
}

func (q *queuedLock) newAcquisition(ctx context.Context, try bool, w *lockWords) *queuedAcquisition {
	c := q.c
	qa := &queuedAcquisition{q: q, parent: leaseFromKey(ctx, w.leaseKey), owner: c.newOwner(), hold: c.newHold(), lease: w.lease}
	qa.waiter = qa.owner
	mode := "first"
	if try {
		mode = "try"
	}
	if qa.parent != nil {
		qa.owner, qa.lease, qa.waiter = qa.parent.h.owner, qa.parent.h.lease, c.newOwner()
		qa.short = handOverLease(c, qa.lease, q.cfg, qa.parent)
		qa.args = acquireArgs(qa.owner, qa.hold, qa.lease, qa.waiter, q.cfg.waiterExpiry, mode, qa.short, qa.parent)
		return qa
	}
	qa.short = w.short
	qa.args = []string{qa.owner, qa.hold, w.leaseMs, qa.waiter, w.expiryMs, mode, w.shortMs, "", "", ""}
	return qa
}

// acquireArgs are the arguments of acquire.lua and fair_acquire.lua; the
// mode ("first", "try", "queued" or "") is at modeArg, and whether the
// Client has no other waiter on the lock at firstArg, set per attempt. A
// re-entry of parent sends the token of the parent's ownership: the script
// adds the hold only while that ownership holds the lock in Redis, and
// never takes the lock afresh under the parent's owner id.
func acquireArgs(owner, hold string, lease time.Duration, waiter string, waiterExpiry time.Duration, mode string, short time.Duration, parent *Lease) []string {
	return []string{owner, hold, strconv.FormatInt(lease.Milliseconds(), 10),
		waiter, strconv.FormatInt(waiterExpiry.Milliseconds(), 10), mode, msArg(short), "", "", parentTokenArg(parent)}
}

// parentTokenArg is the script argument of a re-entry of parent: the token
// of the parent's ownership in Redis; "" for no re-entry (nil).
func parentTokenArg(parent *Lease) string {
	if parent == nil {
		return ""
	}
	return strconv.FormatUint(parent.h.token, 10)
}

const (
	modeArg    = 5
	firstArg   = 7
	reserveArg = 8
)

// attempt runs the acquire script once: the Lease when it took the lock,
// or how long to wait for a message before looking again.
func (qa *queuedAcquisition) attempt(ctx context.Context) (*Lease, time.Duration, error) {
	q, c := qa.q, qa.q.c
	qa.args[firstArg] = ""
	if qa.args[modeArg] != "try" && c.presence.alone(q.keys, qa.joined) {
		qa.args[firstArg] = "1"
	}
	reserve := 0
	if qa.reserve != nil {
		reserve = qa.reserve()
	}
	qa.args[reserveArg] = ""
	if reserve > 0 {
		qa.args[reserveArg] = strconv.Itoa(reserve)
	}
	sent := time.Now()
	qa.lastSent = sent
	res, err := q.attempt(ctx, qa.args)
	if err != nil {
		// The attempt may have queued the waiter.
		qa.args[modeArg] = "queued"
		return nil, 0, err
	}
	ok, val, err := parseAcquire(res)
	if err != nil {
		return nil, 0, refusedReentry(qa.parent, err)
	}
	if !ok {
		return nil, qa.queued(res, val), nil
	}
	qa.reserved, qa.tookToken = 0, val
	if len(res) > 3 {
		n, _ := res[3].AsInt64()
		qa.reserved = int(max(min(n, maxLocalPasses), 0))
	}
	l, err := c.grant(ctx, grant{kind: q.kind, name: q.name, keys: q.keys, key: q.keys.lock, parent: qa.parent, owner: qa.owner, hold: qa.hold,
		token: val, lease: qa.lease, watchdog: q.cfg.fixedLease == 0, sent: sent})
	if err != nil {
		q.releaseAbandoned(ctx, qa.owner, qa.hold)
	}
	return l, 0, err
}

// queued notes that an attempt queued the waiter (or kept its place) and
// returns how long it waits for a message: val is the holder's remaining
// lease, or with a FairMutex whose head is another live waiter, the time
// until that waiter's Client's deadline.
func (qa *queuedAcquisition) queued(res []rueidis.RedisMessage, val int64) time.Duration {
	q, c := qa.q, qa.q.c
	qa.args[modeArg] = "queued"
	if len(res) > 4 {
		qa.seen, _ = res[3].AsInt64()
		qa.seenAt, _ = res[4].AsInt64()
	}
	qa.holder = ""
	if len(res) > 5 {
		qa.holder, _ = res[5].ToString()
	}
	if !qa.joined {
		qa.joined = true
		c.presence.join(q.keys, q.cfg.waiterExpiry)
	}
	if len(res) > 2 && res[2].IsInt64() {
		if held, _ := res[2].AsInt64(); held == 0 {
			// Free, and the head is another live waiter: look again when
			// its Client's deadline passes.
			return time.Duration(val)*time.Millisecond + time.Millisecond
		}
	}
	// The place lives as long as the Client renews its deadline in the
	// queue, and the Client looks at the lock when the holder's lease runs
	// out (a holder that died publishes nothing): the waiter sleeps until a
	// message wakes it.
	c.presence.watch(q.keys, val)
	return waiterFallback
}

// leave gives up the waiter's place, if an attempt may have taken one.
func (qa *queuedAcquisition) leave(ctx context.Context) {
	if qa.args[modeArg] != "queued" {
		return
	}
	qa.q.c.leaveQueueOrRetry(ctx, qa.q.keys, qa.waiter, qa.owner, qa.hold)
}

// waiterFallback bounds how long a waiter sleeps without a message: its
// Client wakes it when the lock may have become free (see presence); this
// is only a safety net.
const waiterFallback = 2 * time.Minute

// handOverLease is the lease with which a release may hand the lock over to
// a waiter: the waiter's lease, but no longer than the claim window
// (handOverClaim) nor than its place in the queue lives, so that a waiter
// that died meanwhile holds the lock no longer than that; its watchdog
// renews the full lease a third into that one, unless the holder unlocked
// before (most hand-overs cost no renewal). The waiter expiry alone would
// not do: a dead Client's places live for all of it, and the renewals that
// keep a live Client's places cost less the longer it is. Locks with a
// fixed lease, re-entries, and the locks of a Client that waits for
// replicas (WithReplicaAck: a lock handed over is not waited for) are not
// handed over (0): their waiters are woken and take the lock themselves.
func handOverLease(c *Client, lease time.Duration, cfg lockConfig, parent *Lease) time.Duration {
	if cfg.fixedLease > 0 || parent != nil || c.cfg.ackReplicas > 0 {
		return 0
	}
	return min(lease, cfg.waiterExpiry, handOverClaim)
}

// handOverClaim is the claim window of a hand-over: how long a lock
// handed over to a waiter stays its own unless the waiter's Client renews
// it, which a live one does a third into it. A lock handed to a dead
// waiter is free again after it, and the waiting Clients, which read its
// lease when the hand-over changed the lock, look then.
const handOverClaim = 3 * time.Second

// msArg is d in milliseconds as a script argument, "" for 0.
func msArg(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}

// handedOver takes a lock that a release handed over to the waiter, as
// the message "TOKEN MS [N]" told: the token it got, the server's clock in
// ms at the release, and the tokens reserved after it for the Client's
// local passes, when the waiter asked for some. The message is trusted
// only as far as it can be:
//   - A token not above the last one the waiter's last attempt saw is a
//     hand-over that came late (the attempt would have found the lock its
//     own otherwise), and the lock may have moved on since: it is ignored,
//     and the waiter asks Redis again.
//   - The key got the lease short at the release, which the server's clock
//     places after the last attempt ran, and so after it was sent: by more
//     than (MS - seenAt - 1) ms, both readings being whole milliseconds
//     (by (MS - seenAt) ms, the release could be counted up to a
//     millisecond after it ran). The lease is counted from there, and a
//     grant that comes late is confirmed by a renewal that checks
//     ownership before it is delivered (grant).
//
// It returns nil without an error when the lock is not the waiter's: the
// wait goes on.
func (qa *queuedAcquisition) handedOver(ctx context.Context, msg string) (*Lease, error) {
	q := qa.q
	tokText, rest, _ := strings.Cut(msg, " ")
	msText, reservedText, _ := strings.Cut(rest, " ")
	tok, err := strconv.ParseInt(tokText, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("redisync: lock handed over with a bad message %q", msg)
	}
	if tok <= qa.seen {
		return nil, nil
	}
	at := qa.lastSent
	if ms, err := strconv.ParseInt(msText, 10, 64); err == nil && qa.seenAt > 0 && ms > qa.seenAt+1 {
		// Each reading truncates its millisecond: the release ran more
		// than ms-seenAt-1 ms after the attempt, perhaps no more.
		at = at.Add(time.Duration(ms-qa.seenAt-1) * time.Millisecond)
	}
	g := grant{kind: q.kind, name: q.name, keys: q.keys, key: q.keys.lock, owner: qa.owner, hold: qa.hold,
		token: tok, lease: qa.lease, watchdog: true, sent: at}
	if qa.short < qa.lease {
		g.initial = qa.short
	}
	qa.tookToken, qa.reserved = tok, 0
	if n, err := strconv.Atoi(reservedText); err == nil && n > 0 {
		qa.reserved = min(n, maxLocalPasses)
	}
	return q.c.grant(ctx, g)
}

// leaveQueueOrRetry is leaveQueue, retried at the presence passes when it
// fails.
func (c *Client) leaveQueueOrRetry(ctx context.Context, keys lockKeys, waiter, owner, hold string) {
	if err := c.leaveQueue(ctx, keys, waiter, owner, hold); err != nil {
		c.presence.orphan(keys, func(ctx context.Context) error { return c.leaveQueue(ctx, keys, waiter, owner, hold) })
	}
}

// leaveQueue gives up a waiter's place in the queue of a Mutex or FairMutex;
// a lock handed over to it meanwhile (owner, hold) is given back. When the
// lock is free, it goes to the waiter now at the head.
func (c *Client) leaveQueue(ctx context.Context, keys lockKeys, waiter, owner, hold string) error {
	err := leaveScript.exec(ctx, c.rc, []string{keys.lock, keys.queue, keys.waiters},
		[]string{waiter, keys.channel, owner, hold, c.cfg.retentionArg}).Error()
	if err != nil {
		c.log.Debug("redisync: leaving the queue failed; retrying, and the place expires once the Client stops renewing it", "key", keys.queue, "err", err)
	}
	return err
}

// attempt runs the acquire script once, and the WAIT that WithReplicaAck
// asks for. An attempt whose reply comes after its caller gave up leaves
// the place it may have taken, and gives back the lock it may have taken;
// one that fewer replicas acknowledged releases the lock it took.
func (q *queuedLock) attempt(ctx context.Context, args []string) ([]rueidis.RedisMessage, error) {
	c := q.c
	owner, hold, waiter := args[0], args[1], args[3]
	return c.runAcquire(ctx, q.script, "acquire", q.wordsOf().keys, args,
		func(res []rueidis.RedisMessage) bool {
			ok, _, _ := parseAcquire(res)
			return ok
		},
		func(ctx context.Context) { q.releaseAbandoned(ctx, owner, hold) },
		func(ctx context.Context) { c.leaveQueueOrRetry(ctx, q.keys, waiter, owner, hold) })
}

// releaseAbandoned releases a hold the caller will not get (see
// Client.cleanup).
func (q *queuedLock) releaseAbandoned(ctx context.Context, owner, hold string) {
	q.c.cleanup(ctx, func(ctx context.Context) {
		if _, err := q.c.release(ctx, q.keys, owner, hold); err != nil {
			q.c.log.Warn("redisync: could not undo an acquisition whose outcome is unknown; if it took anything, that expires with its lease", "key", q.keys.lock, "err", err)
		}
	})
}

// parseAcquire reads the acquire script's reply: {1, token, holds} or
// {0, pttl}; a refused re-entry, {-1, why}, is a *reentryRefusal.
func parseAcquire(res []rueidis.RedisMessage) (ok bool, val int64, err error) {
	if len(res) < 2 {
		return false, 0, fmt.Errorf("redisync: acquire: unexpected reply of %d elements", len(res))
	}
	flag, err := res[0].AsInt64()
	if err != nil {
		return false, 0, fmt.Errorf("redisync: acquire: %w", err)
	}
	if flag == -1 {
		why, _ := res[1].AsInt64()
		return false, 0, &reentryRefusal{reason: refusedStateErr(why)}
	}
	if flag == 1 {
		s, err := res[1].ToString()
		if err != nil {
			return false, 0, fmt.Errorf("redisync: acquire: %w", err)
		}
		tok, err := strconv.ParseInt(s, 10, 64)
		return true, tok, err
	}
	ttl, err := res[1].AsInt64()
	return false, ttl, err
}

// MutexState is a snapshot of a mutex in Redis.
type MutexState struct {
	Locked bool
	// Owner is the holder's owner id: the holding Client's ID, a colon and
	// a sequence number.
	Owner string
	// Holds is the number of holds (re-entries count) of the owner.
	Holds int
	// TTL is the remaining lease; negative when the key has no expiry.
	TTL time.Duration
	// Token is the holder's fencing token.
	Token uint64
	// Waiters is the number of places in the lock's queue, including
	// places of dead waiters that have not expired yet, and one for the
	// groups and quorums that wait for the lock.
	Waiters int
}

// ClientID returns the id of the Client that holds the mutex ("" when free).
func (s MutexState) ClientID() string { return clientIDOf(s.Owner) }

// Inspect reads the mutex's state in one round trip.
func (m *Mutex) Inspect(ctx context.Context) (MutexState, error) {
	if err := m.check(ctx); err != nil {
		return MutexState{}, err
	}
	return m.c.inspect(ctx, m.keys)
}

// inspect reads the state of a Mutex or FairMutex.
func (c *Client) inspect(ctx context.Context, keys lockKeys) (MutexState, error) {
	return mutexState(inspectScript.exec(ctx, c.rc, inspectExec(keys).Keys, nil))
}

// inspectExec is the inspect script's call for the lock keys.
func inspectExec(keys lockKeys) rueidis.LuaExec {
	return rueidis.LuaExec{Keys: []string{keys.lock, keys.queue}}
}

// mutexState reads the inspect script's reply.
func mutexState(r rueidis.RedisResult) (MutexState, error) {
	res, err := r.ToArray()
	if err != nil {
		return MutexState{}, redisErr("inspect", err)
	}
	if len(res) != 5 {
		return MutexState{}, errors.New("redisync: inspect: unexpected reply")
	}
	return parseMutexState(res), nil
}

// parseMutexState reads {owner, token, holds, pttl, queued}.
func parseMutexState(res []rueidis.RedisMessage) MutexState {
	var st MutexState
	st.Owner, _ = res[0].ToString()
	tok, _ := res[1].ToString()
	st.Token, _ = strconv.ParseUint(tok, 10, 64)
	holds, _ := res[2].AsInt64()
	pttl, _ := res[3].AsInt64()
	queued, _ := res[4].AsInt64()
	st.Holds = int(holds)
	st.Waiters = int(queued)
	st.Locked = st.Owner != ""
	if st.Locked {
		st.TTL = time.Duration(pttl) * time.Millisecond
	}
	return st
}

// ForceUnlock deletes the lock whoever holds it and hands it to the first
// waiter of its queue, as a release does. It reports whether the mutex was
// locked. The Client's own goroutines no longer pass the lock on locally
// from the tokens reserved before: their next Unlock asks Redis. The holder's lease reports ErrForceUnlocked (which matches
// ErrExpired): about one round trip later when its Client's LossDetection
// is DetectOnChange, at its next renewal (within a third of the watchdog
// lease) otherwise. For operators: a holder that is alive loses mutual
// exclusion.
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) {
	if err := m.check(ctx); err != nil {
		return false, err
	}
	// The Client sees the lock move: the block of tokens its goroutines
	// pass the lock on with (cohort) no longer vouches for a hold, before
	// the force is sent (a pass after it is sent may follow it in Redis)
	// and whatever becomes of the invalidation Redis then sends. The next
	// Unlock asks Redis, which finds the lock gone.
	m.c.voidPasses([]string{m.keys.lock}, false)
	return m.c.forceUnlock(ctx, m.keys)
}

// forceUnlock runs the force script of a Mutex or FairMutex.
func (c *Client) forceUnlock(ctx context.Context, keys lockKeys) (bool, error) {
	return c.runFound(ctx, forceScript, "force unlock", []string{keys.lock, keys.queue, keys.waiters},
		[]string{keys.channel, c.cfg.retentionArg})
}

// Locker returns a sync.Locker backed by the mutex, for code that wants
// Lock() and Unlock() without contexts or errors.
func (m *Mutex) Locker() *Locker {
	var c *Client
	if m != nil {
		c = m.c
	}
	return newLocker(c, m.Name(), m.Lock)
}
