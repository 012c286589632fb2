// Package redisync provides distributed synchronization primitives on Redis:
// what package sync gives the goroutines of one process, for a fleet of
// processes.
//
// A Client wraps one rueidis.Client (one multiplexed connection per Redis
// node) and owns the shared machinery every primitive uses: a random client
// id, the watchdog that keeps leases alive, and the pub/sub subscriptions that
// wake waiters. Primitives are cheap handles made from a Client:
//
//	c, err := redisync.Dial(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
//	if err != nil { ... }
//	defer c.Close()
//	m := c.Mutex("orders:42")
//	l, err := m.Lock(ctx)
//	if err != nil { ... }
//	defer l.Unlock(context.WithoutCancel(ctx))
//
// A held lock is a Lease. Its Lost channel is closed when the lease is lost
// (the watchdog could not renew it in time, the key expired or was deleted,
// another owner took it, the Client was closed) and Err tells which. A
// Client from Dial or DialURL learns that a lock was deleted or taken over
// behind its holder about a round trip later; one from New on a
// rueidis.Client of the caller's, at its next renewal, unless DetectChanges
// was called on that client's option (see LossDetection).
//
// Every key and channel of one lock share a Redis Cluster hash tag, so the
// library works unchanged on standalone Redis, Sentinel and Cluster. Redis
// 7.0 or newer is the baseline; 6.2 works with classic instead of sharded
// pub/sub.
package redisync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"

	"github.com/redisync/redisync/internal/engine"
)

// Errors returned by the package. Match them with errors.Is: they are often
// wrapped with detail, or joined with the Redis error that caused them.
var (
	// ErrInvalidArgument reports bad input: an empty name, a nil client or
	// context, a duration that is not positive.
	ErrInvalidArgument = errors.New("redisync: invalid argument")
	// ErrClosed reports that the Client was closed. It is also the reason a
	// lease reports when its Client is closed while it is held.
	ErrClosed = errors.New("redisync: client closed")
	// ErrLocked reports that a single attempt found what it asked for held
	// by another owner. It is not a failure to reach Redis. It is the one
	// error to match (errors.Is) for "someone else has it" after the single
	// attempt of every primitive: TryLock of a Mutex, FairMutex, RWMutex and
	// Group and TryRLock return it (wrapped with detail); Semaphore.TryLock
	// returns ErrNoPermits, which matches ErrLocked; Quorum.TryLock returns
	// ErrNoQuorum, which wraps ErrLocked when servers found the lock held by
	// another owner.
	//
	// A wait that its ctx ended (Lock, RLock, Acquire; Latch.Wait) returns an
	// error that names what it waited for and matches ctx's error
	// (context.DeadlineExceeded or context.Canceled) and, where something
	// held it, ErrLocked (ErrNoPermits for a Semaphore): "redisync: wait for
	// mutex "orders" ended: context deadline exceeded; locked by another
	// owner". A single attempt's ErrLocked never matches ctx's error: it
	// means taken at that one attempt. To tell a timed-out wait from other
	// errors, match ctx's error.
	ErrLocked = errors.New("redisync: locked by another owner")
	// ErrNotHeld reports an Unlock of a lease that no longer holds its lock:
	// it was already released, it was lost, or it was never acquired.
	ErrNotHeld = errors.New("redisync: lock not held")
	// ErrWrongType reports that a lock's key holds a value the library did
	// not write there.
	ErrWrongType = errors.New("redisync: key holds a value of the wrong type")
	// ErrNotReplicated reports that an acquisition was not acknowledged by
	// the replicas WithReplicaAck asks for in time. The lock was released.
	ErrNotReplicated = errors.New("redisync: acquisition not acknowledged by enough replicas")
	// ErrUpgrade reports an RWMutex Lock with a context that carries a read
	// lease of the same lock and no write lease: the writer would wait for
	// every reader to leave, its own read lease included, forever. It is
	// returned at once and nothing is acquired. Release the read lease, then
	// Lock.
	ErrUpgrade = errors.New("redisync: cannot upgrade a read lease to a write lease")
	// ErrNoPermits reports that a single attempt (Semaphore.TryLock) could
	// not have the permits it asked for: they are held, or promised to
	// earlier waiters. It is not a failure to reach Redis. It matches
	// ErrLocked.
	ErrNoPermits error = &pkgError{msg: "redisync: not enough permits available", errs: []error{ErrLocked}}
	// ErrNoSize reports an acquisition from a semaphore that has no size:
	// it was never set, it was deleted, or a Redis server without
	// persistence restarted. It always comes with ErrInvalidArgument, as
	// acquiring from a semaphore of size 0 is asking for more permits than
	// its size.
	ErrNoSize = errors.New("redisync: semaphore has no size")
	// ErrNoQuorum reports that a Quorum could not be acquired, or kept, on a
	// majority of its servers: too few granted it (others held it, or were
	// unreachable or too slow), or acquiring it took so long that no
	// validity was left. A failed acquisition leaves nothing held. It wraps
	// the servers' errors (ErrLocked for a server where another owner held
	// the lock, so that a refused TryLock matches ErrLocked), and as the
	// reason of a lost Quorum lease the members' loss reasons.
	ErrNoQuorum = errors.New("redisync: no quorum")
)

// Reasons a Lease ends, reported by Lease.Err and by context.Cause of
// Lease.Context.
var (
	// ErrReleased: the lease was released by Unlock.
	ErrReleased = errors.New("redisync: lease released")
	// ErrDetached: the lease was left to expire in Redis by Detach.
	ErrDetached = errors.New("redisync: lease detached")
	// ErrExpired: the lock's key expired or was deleted (a DEL, a flush, a
	// restart of a Redis server without persistence, a failover to a
	// replica that never got the key).
	ErrExpired = errors.New("redisync: lease expired or lock deleted")
	// ErrForceUnlocked: an operator removed the lock (ForceUnlock, or
	// "redisync unlock --force") while the lease held it. It matches
	// ErrExpired too. Mutex, FairMutex and Group and Quorum members report
	// it; other primitives report a forced unlock as ErrExpired.
	ErrForceUnlocked error = forceUnlocked{}
	// ErrTakenOver: the lock's key is held by another owner (it expired and
	// someone acquired it) or was overwritten.
	ErrTakenOver = errors.New("redisync: lock taken over by another owner")
	// ErrConnectionLost: the watchdog could not renew the lease before it
	// could have expired on the server, so another client may now take the
	// lock. Reported before that can happen, within a safety margin of a
	// tenth of the lease.
	ErrConnectionLost = errors.New("redisync: connection lost before the lease could be renewed")
)

// forceUnlocked is ErrForceUnlocked: its own reason, and ErrExpired for
// code written before it existed.
type forceUnlocked struct{}

func (forceUnlocked) Error() string        { return "redisync: lock force-unlocked" }
func (forceUnlocked) Is(target error) bool { return target == ErrExpired }

const (
	defaultWatchdogLease  = 30 * time.Second
	defaultPrefix         = "redisync"
	defaultFenceRetention = 24 * time.Hour
	// cleanupTimeout bounds the releases the library sends on its own: after
	// an abandoned acquire, on Close.
	cleanupTimeout = 5 * time.Second
)

// Option configures a Client.
type Option func(*config)

type config struct {
	watchdogLease  time.Duration
	prefix         string
	logger         *slog.Logger
	fenceRetention time.Duration
	retentionArg   string // fenceRetention in ms, as the scripts take it
	ackReplicas    int
	ackTimeout     time.Duration
	metrics        Metrics
	clientName     string
	named          bool              // WithClientName was given
	changes        *invalidationHook // DetectChanges installed it
	noChanges      bool              // DetectChanges was given a nil option
}

// WithWatchdogLease sets the lease of locks acquired without a lease of
// their own, WithFixedLease or WithRenewedLease (default 30s). The watchdog
// renews such leases every third of it; a lease whose renewal has not
// succeeded for nine tenths of it is reported lost (ErrConnectionLost). It
// is also what a crash of a holder costs the next one: the lock stays held
// until the lease runs out. Redis counts in milliseconds: it must be at
// least one.
func WithWatchdogLease(d time.Duration) Option {
	return func(c *config) { c.watchdogLease = d }
}

// WithPrefix sets the prefix of every key and channel (default "redisync").
// It must be non-empty and contain no '{' or '}', which would break the
// Cluster hash tags.
func WithPrefix(p string) Option {
	return func(c *config) { c.prefix = p }
}

// WithLogger sets the logger for what the library cannot return to a caller:
// renewal failures, lost subscriptions, failed background releases. The
// default is slog.Default(). Lines carry the lock's key.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithFenceRetention sets how long a lock's fencing counter outlives its last
// release (default 24h). Fencing tokens count up by one from the server's
// clock in microseconds while the counter lives; after it expires the next
// one is the clock again, greater unless the server's clock stepped back
// by more than the time since the last token. A Mutex or FairMutex keeps its
// counter in the lock's hash, which a release keeps for this long: when a
// holder's lease runs out unreleased, the counter goes with the lock. It
// must be at least a millisecond.
func WithFenceRetention(d time.Duration) Option {
	return func(c *config) { c.fenceRetention = d }
}

// WithReplicaAck makes every acquisition wait, after taking the lock on the
// primary, until at least replicas replicas have acknowledged it (Redis
// WAIT), for at most timeout. If fewer do, the lock is released and the
// attempt fails with ErrNotReplicated: TryLock returns it, Lock retries like
// a connection error until its context ends. This narrows the window in
// which a failover to a replica that never saw the lock lets a second client
// take it; it does not close it (replication stays asynchronous, and
// renewals are not waited for). A Mutex Unlock that keeps the lock for
// goroutines of the Client with new fencing tokens (WithLocalPasses) waits
// for the replicas too: when fewer acknowledge, it passes nothing on and
// releases the lock. So does the raise of the fencing counters of a Group
// taken one lock at a time, or of a Quorum (to the group's token, before
// its Lease is returned): a raise fewer replicas acknowledge fails a
// Group's attempt with ErrNotReplicated, and what it took is released; a
// Quorum counts that server as not confirming. Each
// acquisition (each such Unlock, each such raise) then takes a dedicated
// connection from rueidis' pool for the script and the WAIT.
// replicas must be at least 1 and timeout at least a millisecond; off by
// default.
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(c *config) {
		c.ackReplicas, c.ackTimeout = replicas, timeout
		if replicas < 1 {
			c.ackReplicas = -1
		}
	}
}

// WithClientName names the Client, for the people who operate the
// programs that use it: give it what finds the process (a host, a pid, a
// service). Dial names the Client's connections "redisync:ID:NAME" (ID
// being Client.ID), as CLIENT LIST shows them, and that is where `redisync
// inspect` and `redisync watch` find the name of the Clients that hold
// locks; nothing more is written to Redis. A Client made by New uses the
// caller's connections, whose names are the caller's: it keeps one
// connection of its own from rc, on one node, named so, until Close
// (dialed again a second after it breaks), so that the CLI finds its name
// as it finds a dialed Client's. The name labels the Client's log lines
// too. Redis accepts
// printable ASCII without spaces in connection names: any other name,
// the empty name included, makes New and Dial fail with ErrInvalidArgument.
func WithClientName(name string) Option {
	return func(c *config) { c.clientName, c.named = name, true }
}

// DetectChanges gives a Client made by New on a rueidis.Client of the
// caller's the LossDetection of a dialed one, DetectOnChange: a lock
// deleted or taken over behind its holder is reported lost about one round
// trip later instead of at the next renewal. Call it on the option before
// making the rueidis.Client from it, and give what it returns to New with
// that client:
//
//	detect := redisync.DetectChanges(&opt) // before rueidis.NewClient(opt)
//	rc, err := rueidis.NewClient(opt)
//	...
//	c, err := redisync.New(rc, detect)
//
// It installs an OnInvalidations hook on opt (which calls the hook opt had,
// if any, as well): rueidis' client-side caching then tells the Clients
// made with the returned Option when a key they track changes. The Client
// reads the key of each lock it holds once with client-side caching (two
// commands, and an entry in rc's cache, per lock). Several Clients may
// share rc and the Option; each stops receiving invalidations at Close.
//
// Give the Option only to New with a client made from opt after the call:
// with another client no invalidation arrives, and losses are found at
// renewals only. With opt.DisableCache or opt.AlwaysRESP2 (invalidations
// need RESP3 and caching) nothing is installed and the Option does
// nothing: the Client's LossDetection stays DetectOnRenewal. A nil opt
// makes New fail with ErrInvalidArgument. Dial and DialURL install their
// own hook and ignore the Option.
func DetectChanges(opt *rueidis.ClientOption) Option {
	if opt == nil {
		return func(c *config) { c.noChanges = true }
	}
	if opt.DisableCache || opt.AlwaysRESP2 {
		return func(*config) {}
	}
	hook := &invalidationHook{user: opt.OnInvalidations}
	opt.OnInvalidations = hook.call
	return func(c *config) { c.changes = hook }
}

// validClientName reports whether name is not empty and Redis takes it in
// a connection name (CLIENT SETNAME).
func validClientName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] <= ' ' || name[i] > '~' {
			return false
		}
	}
	return true
}

// connectionName is the name of a Client's connections: the CLI finds
// the name of a lock's holder by its client id there.
func connectionName(id, name string) string {
	return "redisync:" + id + ":" + name
}

// Client is the entry point: it owns the watchdog and the pub/sub
// subscriptions shared by every primitive made from it. A Client is safe for
// concurrent use. Make one per process (or per Redis deployment) and share it.
type Client struct {
	rc      rueidis.Client
	ownsRC  bool
	unhook  func() // stops the invalidations of rc reaching the Client
	id      string
	cfg     config
	log     *slog.Logger
	cluster bool
	seq     atomic.Uint64

	notify   *notifier
	watchdog *watchdog
	tracker  *tracker
	presence *presence

	closed    chan struct{}
	closeOnce sync.Once
	// cleanups are the releases and leaves of acquisitions whose context
	// ended, sent in the background (cleanup); cleanupMu orders their
	// start with Close.
	cleanupMu sync.Mutex
	cleanups  sync.WaitGroup
	waiters   sync.WaitGroup // goroutines started by Acquire

	// cohorts are the goroutines that want a Mutex passed on locally, by
	// lock key (see cohort), in shards (cohortShardOf).
	cohorts [cohortShards]cohortShard

	// nameDone is closed once the name connection of a Client made by New
	// with WithClientName is closed (see keepName); nil without one.
	nameDone chan struct{}
}

// New returns a Client that uses rc for every command. rc stays the
// caller's: Close does not close it. New sends nothing to Redis unless
// given WithClientName. While goroutines wait, the Client takes from rc one
// dedicated connection (per master on Cluster) for its pub/sub
// subscriptions, and gives it back closed once nobody waits; with
// WithClientName it keeps one more, named after it, until Close.
//
// Its LossDetection is DetectOnRenewal: rc does not tell the Client when a
// key changes, and a lock deleted or taken over behind its holder is found
// at the next renewal, up to a third of the watchdog lease later (10s by
// default). With the Option DetectChanges returns, given for the option rc
// was made from, it is DetectOnChange: about a round trip. Dial and DialURL
// give DetectOnChange without it.
//
// A call that waits (Lock, TryLock and Acquire of every lock and
// semaphore, Wait of the latches) returns at most half a second after its
// context ends, as with Dial, whatever rc does. rc ends any other call at
// its context's deadline, and at an earlier cancellation only when it
// pipelines the call (see Dial for when rueidis does not).
func New(rc rueidis.Client, opts ...Option) (*Client, error) {
	if rc == nil {
		return nil, fmt.Errorf("%w: nil rueidis.Client", ErrInvalidArgument)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	c := newClient(rc, uuid.NewString(), cfg, cfg.changes)
	if cfg.named {
		c.keepName()
	}
	return c, nil
}

// Dial connects to Redis with opt and returns a Client that owns the
// connection: Close closes it too. Bad options are reported before
// connecting. With WithClientName, the connections are named after the
// Client (opt.ClientName is replaced).
//
// The Client's LossDetection is DetectOnChange: it installs an
// OnInvalidations hook (calling opt's own hook, if any, as well) and tracks
// the keys of the locks it holds with rueidis' client-side caching, so that
// a lock deleted or taken over behind its holder is reported lost about one
// round trip later. Invalidations need RESP3 and caching: with
// opt.AlwaysRESP2 (a server that speaks RESP2 only, or protocol=2 in a
// URL) Dial sets opt.DisableCache, and with opt.DisableCache the Client's
// LossDetection is DetectOnRenewal.
//
// A call that waits (Lock, TryLock and Acquire of every lock, read-write
// lock, semaphore, Group and Quorum, Wait of the latches) returns at most
// half a second after its context ends, by its deadline or a
// cancellation, whatever Redis does meanwhile: a server that stalls, a
// connection held up or being opened, a WAIT (WithReplicaAck). What it
// sent goes on in the background, and what that took is given back once
// Redis answers; Close waits for it, a few seconds at most.
//
// Any other call to Redis (Unlock, Extend, Inspect, a count) ends at its
// context's deadline, and at an earlier cancellation when rueidis
// pipelines it. A connection pipelines from the start with client-side
// caching; without, once calls overlapped on it or one came with a
// context that can be cancelled and has no deadline. So rueidis waits for
// the reply or the deadline, deaf to a cancellation, of a call that opens
// a connection (the first on it, or after it broke: the handshake waits up
// to opt.Dialer.Timeout, 5 s by default), of a call alone on a connection
// that never pipelined, and of every call with opt.DisableAutoPipelining
// (a connection per call, from a pool).
//
// Options rueidis refuses (ClientOption.DisableCache must be true for a
// server without RESP3, conflicting replica settings, no InitAddress...)
// return an error that matches ErrInvalidArgument as well as rueidis'
// error; nothing stays connected. A server that cannot be reached returns
// rueidis' connection error.
func Dial(opt rueidis.ClientOption, opts ...Option) (*Client, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	id := uuid.NewString()
	if cfg.named {
		opt.ClientName = connectionName(id, cfg.clientName)
	}
	if opt.AlwaysRESP2 {
		opt.DisableCache = true
	}
	var hook *invalidationHook
	if !opt.DisableCache {
		hook = &invalidationHook{user: opt.OnInvalidations}
		opt.OnInvalidations = hook.call
	}
	rc, err := newRueidisClient(opt)
	if err != nil {
		return nil, err
	}
	c := newClient(rc, id, cfg, hook)
	c.ownsRC = true
	c.tracker.dial = &opt
	return c, nil
}

// rueidisOptionErrors are the errors with which rueidis refuses a
// ClientOption: bad input, not a failure to reach Redis.
var rueidisOptionErrors = []error{
	rueidis.ErrNoAddr, rueidis.ErrNoCache, rueidis.ErrWrongPipelineMultiplex,
	rueidis.ErrReplicaOnlyNotSupported, rueidis.ErrNoSendToReplicas,
	rueidis.ErrReplicaOnlyConflict, rueidis.ErrReplicaOnlyConflictWithReplicaSelector,
	rueidis.ErrReplicaOnlyConflictWithReadNodeSelector, rueidis.ErrReplicaSelectorConflictWithReadNodeSelector,
	rueidis.ErrSendToReplicasNotSet, rueidis.ErrInvalidShardsRefreshInterval,
	rueidis.ErrInvalidTopologyRefreshInterval,
}

// newRueidisClient is rueidis.NewClient, its refusals of opt wrapped with
// ErrInvalidArgument.
func newRueidisClient(opt rueidis.ClientOption) (rueidis.Client, error) {
	switch {
	case len(opt.InitAddress) == 0:
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, rueidis.ErrNoAddr)
	case opt.Standalone.EnableRedirect && len(opt.Standalone.ReplicaAddress) > 0:
		return nil, fmt.Errorf("%w: rueidis.ClientOption: Standalone.EnableRedirect and Standalone.ReplicaAddress cannot be used together", ErrInvalidArgument)
	}
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		for _, e := range rueidisOptionErrors {
			if errors.Is(err, e) {
				return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
			}
		}
		return nil, err
	}
	return rc, nil
}

// newConfig applies opts over the defaults and checks the result.
func newConfig(opts []Option) (config, error) {
	cfg := config{
		watchdogLease:  defaultWatchdogLease,
		prefix:         defaultPrefix,
		fenceRetention: defaultFenceRetention,
	}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case cfg.watchdogLease < time.Millisecond:
		return cfg, fmt.Errorf("%w: watchdog lease %v is under a millisecond", ErrInvalidArgument, cfg.watchdogLease)
	case cfg.fenceRetention < time.Millisecond:
		return cfg, fmt.Errorf("%w: fence retention %v is under a millisecond", ErrInvalidArgument, cfg.fenceRetention)
	case cfg.ackReplicas < 0 || (cfg.ackReplicas > 0 && cfg.ackTimeout < time.Millisecond):
		return cfg, fmt.Errorf("%w: replica acknowledgement needs at least one replica and a positive timeout", ErrInvalidArgument)
	case cfg.prefix == "" || strings.ContainsAny(cfg.prefix, "{}"):
		return cfg, fmt.Errorf("%w: prefix %q must be non-empty and contain no '{' or '}'", ErrInvalidArgument, cfg.prefix)
	case cfg.noChanges:
		return cfg, fmt.Errorf("%w: DetectChanges of a nil rueidis.ClientOption", ErrInvalidArgument)
	case cfg.named && !validClientName(cfg.clientName):
		return cfg, fmt.Errorf("%w: client name %q: it must be printable ASCII without spaces, and not empty", ErrInvalidArgument, cfg.clientName)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	cfg.retentionArg = strconv.FormatInt(cfg.fenceRetention.Milliseconds(), 10)
	return cfg, nil
}

// newClient makes a Client on rc; invalidations, when not nil, is where
// rc's OnInvalidations hook sends what it receives.
func newClient(rc rueidis.Client, id string, cfg config, invalidations *invalidationHook) *Client {
	c := &Client{
		rc:      rc,
		id:      id,
		cfg:     cfg,
		cluster: rc.Mode() == rueidis.ClientModeCluster,
		closed:  make(chan struct{}),
	}
	c.log = cfg.logger.With("redisync.client", c.id)
	if cfg.named {
		c.log = c.log.With("redisync.client_name", cfg.clientName)
	}
	c.notify = newNotifier(c)
	c.watchdog = newWatchdog(c)
	c.tracker = newTracker(c, invalidations != nil)
	c.presence = newPresence(c)
	c.unhook = func() {}
	if invalidations != nil {
		c.unhook = invalidations.add(c.tracker.invalidated)
	}
	return c
}

// invalidationHook passes the invalidations of a rueidis.Client to the
// Clients made on it, which exist only after the rueidis.Client does.
type invalidationHook struct {
	user func([]rueidis.RedisMessage)
	mu   sync.Mutex                     // serializes add and remove
	to   atomic.Pointer[[]*invalidated] // read by call, replaced by add and remove
}

// invalidated is one receiver of an invalidationHook.
type invalidated struct{ f func([]rueidis.RedisMessage) }

// add makes f receive the invalidations until remove is called.
func (h *invalidationHook) add(f func([]rueidis.RedisMessage)) (remove func()) {
	r := &invalidated{f}
	h.mu.Lock()
	defer h.mu.Unlock()
	var to []*invalidated
	if p := h.to.Load(); p != nil {
		to = append(to, *p...)
	}
	to = append(to, r)
	h.to.Store(&to)
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		var rest []*invalidated
		for _, x := range *h.to.Load() {
			if x != r {
				rest = append(rest, x)
			}
		}
		h.to.Store(&rest)
	}
}

func (h *invalidationHook) call(keys []rueidis.RedisMessage) {
	if p := h.to.Load(); p != nil {
		for _, r := range *p {
			r.f(keys)
		}
	}
	if h.user != nil {
		h.user(keys)
	}
}

// ID returns the client's random id, the first part of every owner id it
// writes into Redis.
func (c *Client) ID() string {
	if c == nil {
		return ""
	}
	return c.id
}

// Close stops the watchdog and every subscription and goroutine the Client
// started. Every live Lease reports loss with ErrClosed, and its lock is
// released in Redis at once (one pipelined batch, bounded by a few
// seconds) so other clients do not wait for the lease to expire; so is the
// lock of a Lease reported lost with ErrConnectionLost and not unlocked
// since, whose key may still hold it for up to a lease after the loss.
// Acquisitions in progress return ErrClosed. Close also waits for the
// calls that returned at their context's end while Redis did not answer,
// and for the undoing of what they sent, so that what a script took is
// given back after it ran: until Redis answers, 5 s at most for an undo,
// and for a call as long as rueidis waits for a reply
// (opt.ConnWriteTimeout, 10 s by default, for a connection that stalls).
// Places in queues that the Client failed to leave, which its background
// loop was still retrying, are left once more (5 s at most). Close is
// idempotent and returns nil; later calls on the Client and its primitives
// return ErrClosed. A Client not made by New or Dial (a zero Client) has
// nothing to close: ErrInvalidArgument.
func (c *Client) Close() error {
	if c == nil {
		return nil
	}
	if err := c.invalid(); err != nil {
		return err
	}
	c.closeOnce.Do(func() {
		close(c.closed)
		c.watchdog.close()
		c.tracker.close()
		c.unhook()
		c.waiters.Wait()
		c.cleanupMu.Lock()
		c.cleanupMu.Unlock() //nolint:staticcheck // no cleanup starts once closed is seen under it
		c.cleanups.Wait()
		c.presence.close()
		c.notify.close()
		if c.nameDone != nil {
			<-c.nameDone
		}
		if c.ownsRC {
			c.rc.Close()
		}
	})
	return nil
}

// invalid reports a Client that cannot be used: nil, or not made by New or
// Dial (a zero Client, which has no connection).
func (c *Client) invalid() error {
	switch {
	case c == nil:
		return fmt.Errorf("%w: nil Client", ErrInvalidArgument)
	case c.rc == nil:
		return fmt.Errorf("%w: Client not made by New or Dial", ErrInvalidArgument)
	}
	return nil
}

func (c *Client) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// newOwner returns a fresh owner id: unique across clients and never reused.
func (c *Client) newOwner() string {
	return c.id + ":" + strconv.FormatUint(c.seq.Add(1), 10)
}

// clientIDOf returns the id of the Client an owner id (see newOwner) is of.
func clientIDOf(owner string) string {
	if i := strings.LastIndexByte(owner, ':'); i >= 0 {
		return owner[:i]
	}
	return owner
}

// newHold returns a fresh hold field, unique within the client.
func (c *Client) newHold() string {
	return "#" + strconv.FormatUint(c.seq.Add(1), 10)
}

// lockKeys are the Redis names of one lock. They share a hash tag.
type lockKeys struct {
	lock    string
	channel string
	queue   string // zset: waiter id -> arrival number
	waiters string // hash: waiter id -> deadline in server ms
}

// ownerProbe reads the owner of the lock, empty or none while it is free:
// what Groups and Quorums waiting for it follow (see subscription.follow).
func (k lockKeys) ownerProbe(rc rueidis.Client) rueidis.Completed {
	return rc.B().Hget().Key(k.lock).Field("owner").Build()
}

// keysFor names the keys of a Mutex: prefix:T for the lock (with its
// fencing counter), prefix:ch:T for its channel and prefix:q:T and
// prefix:w:T for its waiters, where T is tagged(name). Other primitives name
// theirs with key.
func (c *Client) keysFor(name string) lockKeys {
	return c.queuedKeys("", "ch", "q", "w", name)
}

// queuedKeys names the keys of a lock with a queue as key does, of the
// kinds given (lock "" for prefix:T), in one allocation: a lock made for
// one Lock (c.Mutex(name).Lock(ctx)) names them at every call.
func (c *Client) queuedKeys(lock, channel, queue, waiters, name string) lockKeys {
	t := tagged(name)
	kinds := [4]string{lock, channel, queue, waiters}
	n := 0
	for _, k := range kinds {
		n += len(c.cfg.prefix) + 1 + len(k) + 1 + len(t)
	}
	var b strings.Builder
	b.Grow(n)
	var names [4]string
	for i, k := range kinds {
		from := b.Len()
		b.WriteString(c.cfg.prefix)
		b.WriteByte(':')
		if k != "" {
			b.WriteString(k)
			b.WriteByte(':')
		}
		b.WriteString(t)
		names[i] = b.String()[from:]
	}
	return lockKeys{lock: names[0], channel: names[1], queue: names[2], waiters: names[3]}
}

// key names one key (or channel) of a primitive: prefix:kind:T. Kinds are
// short words ("fence", "ch", "fair"...), and T always starts with '{' or
// ':', so keys of different kinds, of Mutex locks and of different names
// never coincide, and the first hash tag of every key of one name lies in
// T: they share a slot.
func (c *Client) key(kind, name string) string {
	return c.cfg.prefix + ":" + kind + ":" + tagged(name)
}

// tagged is a name with its Cluster hash tag: {name} for a name without
// braces, :name for a name with a hash tag of its own (so callers can place
// things in one slot), and {#hhhh}:name, tagged with the name's digest, for
// any other name with braces. Different names give different results.
func tagged(name string) string {
	switch {
	case !strings.ContainsAny(name, "{}"):
		return "{" + name + "}"
	case hasHashTag(name):
		return ":" + name
	default:
		return fmt.Sprintf("{#%04x}:%s", slotHash(name), name)
	}
}

// hasHashTag reports whether Redis Cluster would hash s by a tag: a '{'
// followed, later, by a '}' with at least one byte between them.
func hasHashTag(s string) bool { return engine.HasHashTag(s) }

// validName checks a lock name.
func validName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty lock name", ErrInvalidArgument)
	}
	return nil
}

// detached returns a context for work the library must finish even though
// the caller's context ended: releasing what an abandoned call may hold.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}
