package redisson

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/internal/engine"

	"github.com/redis/rueidis"
)

// Redisson's permit expirable semaphore (RPermitExpirableSemaphore):
//
//	string NAME: the permits available
//	zset {NAME}:timeout: the permits acquired, member a permit id's 16
//	        bytes (Java shows an id as 32 lowercase hex digits), score when
//	        the permit expires (ms since the epoch), or 922337203685477 for
//	        a permit without lease; its expiry is NAME's, copied when
//	        permits are taken
//	channel redisson_sc:{NAME}, message: the permits available after a
//	        release or a change, when more than none
//
// Expired permits stay in the zset until a script reclaims them: an
// acquisition reclaims up to as many as it asks for, a release, a count
// or a lease change all of them.

// The scripts of Redisson's permit expirable semaphore.
var (
	redissonPSemAcquireScript = newRedissonPSemScript("psem_acquire")
	redissonPSemReleaseScript = newRedissonPSemScript("psem_release")
	redissonPSemRenewScript   = newRedissonPSemScript("psem_renew")
	redissonPSemCountScript   = newRedissonPSemScript("psem_count")
	redissonPSemSetScript     = newRedissonPSemScript("psem_set")
	redissonPSemLeaseScript   = newRedissonPSemScript("psem_lease")
	redissonPSemInspectScript = newRedissonPSemScript("psem_inspect")
)

func newRedissonPSemScript(name string) engine.Script {
	return newScript("prelude", "sem_prelude", "psem_prelude", name)
}

// NoLease is the lease of a Redisson permit that never expires:
// what Java's acquire() without a lease time takes, what
// PermitExpirableSemaphore.LeaseTime reports for one, and what
// UpdateLeaseTime sets as Java's updateLeaseTime(id, -1, unit) does.
const NoLease time.Duration = -1

// redissonPermitsMax is the most permits one acquisition or release of a
// PermitExpirableSemaphore takes or gives: each is an id sent to
// Redis.
const redissonPermitsMax = 1 << 16

// redissonNoLeaseScore is Redisson's score of a permit without lease
// (PermitExpirableSemaphore.nonExpirableTimeout).
const redissonNoLeaseScore = 922337203685477

// PermitExpirableSemaphore is a semaphore in the layout of
// Redisson's RPermitExpirableSemaphore
// (redisson.getPermitExpirableSemaphore(NAME) in Java): the string NAME
// counts the permits available, and every permit taken is an id in the
// zset {NAME}:timeout with the moment its lease ends. It is a cheap
// handle: make one per use or share one, from many goroutines.
//
// An acquisition of n permits is a Lease, as with the library's other
// locks, holding n ids (PermitIDs returns them, as Java's acquire(n)
// does). Unlike Redisson, whose acquire() takes permits that never expire
// unless given a lease time, a Lease's permits always have a lease: by
// default the Client's watchdog lease (WithWatchdogLease; WithRenewedLease
// gives a handle its own), renewed every third of it by moving the permits' expiry, so that the permits of a
// process that dies come back a watchdog lease later; with
// WithLeaseTime(d) a fixed lease of d, as Java's acquire(d, unit),
// which Lease.Extend moves as Java's updateLeaseTime does. A Lease reports
// redisync.ErrExpired (Lost closes) when one of its permits is released by id
// (Release, TryRelease, Java's release), reclaimed after its lease ran
// out, or deleted with the semaphore; redisync.ErrConnectionLost when the watchdog
// could not renew it in time; redisync.ErrClosed when its Client closes (the
// permits are given back then). Its Unlock gives back every permit it
// still holds, and reports redisync.ErrNotHeld when one of them was no longer held.
// Changes made on the server (a release by id, a delete) are noticed at
// the watchdog's next pass, within a third of the watchdog lease.
//
// Expiry is decided by clocks: the Go side's scripts use the Redis
// server's time, Java's Redisson its own host's clock, so a permit ends
// earlier or later for Java by the skew between the two.
//
// Compared with Semaphore: no fairness (a release wakes every waiter and
// whoever comes first takes the permits), no size (the permits available
// are whatever TrySetPermits, SetPermits and AddPermits set), no fencing
// token; waiters look again when the Client's presence pass finds the
// permits changed, whatever messages were lost, and when the nearest
// permit's lease ends.
type PermitExpirableSemaphore struct {
	c    *Client
	name string
	cfg  config
	err  error
}

// PermitExpirableSemaphore returns the Redisson
// RPermitExpirableSemaphore of the given name. WithLeaseTime gives
// its Leases a fixed lease, WithPubSub sets how it publishes; the
// other Redisson options do not apply. An invalid name or option is
// reported by every method, as redisync.ErrInvalidArgument.
func (c *Client) PermitExpirableSemaphore(name string, opts ...Option) *PermitExpirableSemaphore {
	s := &PermitExpirableSemaphore{c: c, name: name}
	s.cfg, s.err = newConfig(c, name, opts)
	return s
}

// Name returns the semaphore's name.
func (s *PermitExpirableSemaphore) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

// redissonPSemKeys are the keys of the permit expirable semaphore name:
// the semaphore, its permits zset and its channel, as its scripts take
// them.
func redissonPSemKeys(name string) []string {
	return []string{name, redissonSuffixName(name, "timeout"), redissonPrefixName("redisson_sc", name)}
}

func (s *PermitExpirableSemaphore) check(ctx context.Context) error {
	if s == nil {
		return fmt.Errorf("%w: nil PermitExpirableSemaphore", redisync.ErrInvalidArgument)
	}
	return checkHandle("PermitExpirableSemaphore", s.c, s.err, ctx)
}

func (s *PermitExpirableSemaphore) object() (*Client, PubSub, string) {
	return s.c, s.cfg.pubsub, s.name
}

// redissonPSemAcq is one acquisition of n permits, as a handle.
type redissonPSemAcq struct {
	s *PermitExpirableSemaphore
	n int
}

func (a redissonPSemAcq) check(ctx context.Context) error {
	if err := a.s.check(ctx); err != nil {
		return err
	}
	if a.n < 1 || a.n > redissonPermitsMax {
		return fmt.Errorf("%w: %d permits: from 1 to %d", redisync.ErrInvalidArgument, a.n, redissonPermitsMax)
	}
	return nil
}

func (a redissonPSemAcq) client() *Client { return a.s.c }

// Lock takes n permits, waiting as long as ctx allows: for Redisson's
// message on the semaphore's channel, which the Client's waiters share one
// subscription to, looking again when the Client's presence pass (a second
// apart by default) finds the permits changed and when the nearest
// permit's lease ends (an expired permit is reclaimed by the next
// acquisition, which publishes nothing before). A
// semaphore that was never set has no permits: Lock waits for them.
//
// It returns, when ctx ends first, an error naming the semaphore that matches both
// ctx.Err() and redisync.ErrNoPermits (a single attempt's redisync.ErrNoPermits never matches
// ctx's error), and redisync.ErrClosed when the Client
// is closed. Connection errors do not end the wait: Lock retries them with
// backoff until ctx ends. Errors Redis replies with are returned at once:
// redisync.ErrWrongType when NAME holds something else than a number or
// {NAME}:timeout something else than a zset. n must be from 1 to 65536
// (redisync.ErrInvalidArgument). Whenever Lock returns an error nothing is held:
// permits an attempt may have taken without its reply arriving are given
// back, or, if that fails too, come back when their lease ends.
func (s *PermitExpirableSemaphore) Lock(ctx context.Context, n int) (*redisync.Lease, error) {
	return lockHandle(ctx, redissonPSemAcq{s, n}, false)
}

// TryLock makes a single attempt: redisync.ErrNoPermits (which matches redisync.ErrLocked)
// when fewer than n permits are available once expired ones are
// reclaimed, redisync.ErrWrongType and redisync.ErrInvalidArgument as Lock, and any error
// from Redis or the connection at once.
func (s *PermitExpirableSemaphore) TryLock(ctx context.Context, n int) (*redisync.Lease, error) {
	return lockHandle(ctx, redissonPSemAcq{s, n}, true)
}

// Acquire takes n permits in the background and delivers one Lease on the
// returned channel, then closes it, as Mutex.Acquire does: check the
// Lease's Err first; cancel ctx to give up, and a Lease not yet received
// when ctx ends gives its permits back.
func (s *PermitExpirableSemaphore) Acquire(ctx context.Context, n int) <-chan *redisync.Lease {
	return acquireHandle(ctx, redissonPSemAcq{s, n})
}

// newRedissonPermitIDs makes n permit ids as Redisson's generateId does:
// 16 random bytes each, in lowercase hex.
func newRedissonPermitIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = redissonRequestID()
	}
	return ids
}

func (a redissonPSemAcq) acquire(ctx context.Context, try bool) (*redisync.Lease, error) {
	s, c := a.s, a.s.c
	how, classic, sharded, err := c.redissonPubSub(ctx, s.cfg.pubsub, s.name)
	if err != nil {
		return nil, err
	}
	kind := redissonPSemKinds[how]
	lease, watchdog := s.cfg.leaseOn(c)
	keys := redissonPSemKeys(s.name)
	ms := strconv.FormatInt(lease.Milliseconds(), 10)
	// The ids of attempts whose reply never came: they may hold permits,
	// which are given back once the acquisition ends, or in the background
	// once its context ended (unsureMu).
	var (
		unsureMu sync.Mutex
		unsure   []string
	)
	noteUnsure := func(ids []string) {
		unsureMu.Lock()
		unsure = append(unsure, ids...)
		unsureMu.Unlock()
	}
	release := func(ctx context.Context, ids []string) {
		if _, _, err := redissonPSemRelease(ctx, c.rc, s.name, how, "each", ids); err != nil {
			c.log.Warn("redisync: could not give back the permits of a Redisson permit expirable semaphore acquisition whose outcome is unknown; if it took some, they come back when their lease ends", "key", s.name, "err", err)
		}
	}
	giveBack := func(ctx context.Context) {
		unsureMu.Lock()
		ids := unsure
		unsure = nil
		unsureMu.Unlock()
		if len(ids) > 0 {
			release(ctx, ids)
		}
	}
	hasUnsure := func() bool {
		unsureMu.Lock()
		defer unsureMu.Unlock()
		return len(unsure) > 0
	}
	w := engine.Wait{
		Channel: keys[2], Classic: classic, Sharded: sharded,
		// The available permits change with every release, whatever
		// message is lost; a permit that expires is looked at when its
		// lease ends (the attempt's wait).
		Probe: redissonPermitsProbe(s.name), Primitive: redissonPSemPrimitive, Name: s.name,
		Busy: fmt.Errorf("%w: Redisson permit expirable semaphore %s", redisync.ErrNoPermits, s.name),
		Attempt: func(ctx context.Context) (any, time.Duration, error) {
			// Fresh ids every attempt: an attempt whose reply was lost may
			// have taken its own.
			ids := newRedissonPermitIDs(a.n)
			sent := time.Now()
			msgs, grant, err := c.run(ctx, nil, redissonPSemAcquireScript, keys, append([]string{ms, how}, ids...), func(ctx context.Context) {
				release(ctx, ids)
			})
			res := make([]int64, len(msgs))
			for i, m := range msgs {
				if res[i], err = m.AsInt64(); err != nil {
					break
				}
			}
			if err != nil {
				if _, reply := rueidis.IsRedisErr(err); !reply {
					noteUnsure(ids)
				}
				return nil, 0, redisErr("acquire from Redisson permit expirable semaphore "+s.name, err)
			}
			if len(res) < 2 {
				return nil, 0, fmt.Errorf("redisync: acquire from Redisson permit expirable semaphore: unexpected reply of %d elements", len(res))
			}
			if res[0] != 1 {
				if len(res) > 2 && res[2] >= 0 {
					// Look again once the nearest permit has expired.
					return nil, time.Duration(res[2]+1) * time.Millisecond, nil
				}
				return nil, -1, nil
			}
			if hasUnsure() {
				c.cleanup(ctx, giveBack)
			}
			k := engine.Keys{Lock: keys[1], Channel: keys[2]}
			gl, err := grant(&engine.Grant{Kind: kind, Name: s.name, Keys: k, Key: keys[1], Owner: strings.Join(ids, ","), Lease: lease, Watchdog: watchdog, Sent: sent})
			if err != nil {
				// The permits were found expired, or could not be checked
				// after a late reply: whatever of them is still held goes
				// back.
				noteUnsure(ids)
			}
			return gl, 0, err
		},
		Undo: giveBack,
	}
	l, err := c.wait(ctx, w, try)
	if err != nil && hasUnsure() {
		// A Redis error ended it (undo ran if ctx did).
		c.cleanup(ctx, giveBack)
	}
	return l, err
}

// redissonPSemKinds are the lease kinds of RPermitExpirableSemaphore
// permit holders, by publishing mode.
var redissonPSemKinds = byHow(newRedissonPSemKind)

// redissonPSemPrimitive names the permit expirable semaphore in metrics.
const redissonPSemPrimitive = "redisson_permit_expirable_semaphore"

func newRedissonPSemKind(how string) *engine.Kind {
	return &engine.Kind{
		Primitive: redissonPSemPrimitive,
		Renew:     redissonPSemRenewScript,
		Release:   redissonPSemReleaseScript,
		ReleaseAll: func(h engine.Holder) rueidis.LuaExec {
			return rueidis.LuaExec{Keys: redissonPSemKeys(h.Name), Args: append([]string{how, "each"}, redissonHolderIDs(h.Owner)...)}
		},
		Unlock: func(ctx context.Context, h engine.Holder, _ string, _ bool) (engine.State, bool, error) {
			ids := redissonHolderIDs(h.Owner)
			n, _, err := redissonPSemRelease(ctx, h.RC, h.Name, how, "each", ids)
			switch {
			case err != nil:
				return engine.NotHeld, true, err
			case n < len(ids):
				// What was still held was given back; the rest had gone.
				return engine.NotHeld, true, nil
			}
			return engine.Freed, true, nil
		},
	}
}

// redissonHolderIDs are the permit ids a holder of permits holds.
func redissonHolderIDs(owner string) []string { return strings.Split(owner, ",") }

// redissonPSemRelease runs the release script in mode ("all" or "each")
// for ids: the permits given back, and the ids that were not held.
func redissonPSemRelease(ctx context.Context, rc rueidis.Client, name, how, mode string, ids []string) (int, []string, error) {
	res, err := redissonPSemReleaseScript.Exec(ctx, rc, redissonPSemKeys(name), append([]string{how, mode}, ids...)).AsIntSlice()
	if err != nil {
		return 0, nil, redisErr("release to Redisson permit expirable semaphore "+name, err)
	}
	if len(res) < 1 {
		return 0, nil, fmt.Errorf("redisync: release to Redisson permit expirable semaphore: empty reply")
	}
	var missing []string
	for _, i := range res[1:] {
		if i >= 1 && int(i) <= len(ids) {
			missing = append(missing, ids[i-1])
		}
	}
	return int(res[0]), missing, nil
}

// PermitIDs returns the ids of the permits l holds, as Java's acquire(n)
// returns them (32 lowercase hex digits each): Java code can release them
// (release(id)) or read their lease (getLeaseTime(id)). It returns nil
// when l is not a Lease of this semaphore (its name, on its Client).
// It does not tell whether l still holds them: see Lease.Err.
func (s *PermitExpirableSemaphore) PermitIDs(l *redisync.Lease) []string {
	info, ok := leaseInfo(l)
	if s == nil || s.c == nil || !ok || info.Kind == nil || info.Kind.Primitive != redissonPSemPrimitive || info.C != any(s.c.parent) || info.Name != s.name {
		return nil
	}
	return redissonHolderIDs(info.Owner)
}

// redissonPermitIDs checks permit ids given by a caller: 32 hex digits
// each (either case, as Java's decodeHexDump reads them), none twice, at
// least one. It returns them in lowercase.
func redissonPermitIDs(ids []string) ([]string, error) {
	if len(ids) == 0 || len(ids) > redissonPermitsMax {
		return nil, fmt.Errorf("%w: %d permit ids: from 1 to %d", redisync.ErrInvalidArgument, len(ids), redissonPermitsMax)
	}
	out := make([]string, len(ids))
	seen := make(map[string]bool, len(ids))
	for i, id := range ids {
		b, err := hex.DecodeString(id)
		if err != nil || len(b) != 16 {
			return nil, fmt.Errorf("%w: permit id %q is not 32 hex digits", redisync.ErrInvalidArgument, id)
		}
		out[i] = hex.EncodeToString(b)
		if seen[out[i]] {
			return nil, fmt.Errorf("%w: permit id %s given twice", redisync.ErrInvalidArgument, out[i])
		}
		seen[out[i]] = true
	}
	return out, nil
}

// Release gives back the permits of the given ids, whoever took them (a
// Go Lease, whose holder then loses them, or Java), as Java's
// release(List) does: only if every one of them is held (taken, not
// released, its lease not over). Otherwise nothing is given back and
// Release returns redisync.ErrNotHeld naming the ids that were not held. It wakes
// the waiters. An id must be 32 hex digits, and at least one must be
// given, each once (redisync.ErrInvalidArgument). redisync.ErrWrongType when NAME or
// {NAME}:timeout holds something else; an error from Redis or the
// connection, or ctx's end, is returned as it comes, and then the permits
// may or may not have been given back.
func (s *PermitExpirableSemaphore) Release(ctx context.Context, ids ...string) error {
	ids, err := s.releaseArgs(ctx, ids)
	if err != nil {
		return err
	}
	how, _, _, err := s.c.redissonPubSub(ctx, s.cfg.pubsub, s.name)
	if err != nil {
		return err
	}
	_, missing, err := redissonPSemRelease(ctx, s.c.rc, s.name, how, "all", ids)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: Redisson permit expirable semaphore %s: permits %s have been released, have expired or do not exist", redisync.ErrNotHeld, s.name, strings.Join(missing, ", "))
	}
	return nil
}

// TryRelease gives back those of the permits of the given ids that are
// held, as Java's tryRelease(id) does for each, and returns how many it
// gave back. Ids not held are skipped. Errors as Release.
func (s *PermitExpirableSemaphore) TryRelease(ctx context.Context, ids ...string) (int, error) {
	ids, err := s.releaseArgs(ctx, ids)
	if err != nil {
		return 0, err
	}
	how, _, _, err := s.c.redissonPubSub(ctx, s.cfg.pubsub, s.name)
	if err != nil {
		return 0, err
	}
	n, _, err := redissonPSemRelease(ctx, s.c.rc, s.name, how, "each", ids)
	return n, err
}

func (s *PermitExpirableSemaphore) releaseArgs(ctx context.Context, ids []string) ([]string, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return redissonPermitIDs(ids)
}

// count runs the count script in mode.
func (s *PermitExpirableSemaphore) count(ctx context.Context, mode string) (int64, error) {
	return runOn(ctx, s, redissonPSemCountScript, "count Redisson permit expirable semaphore", func(how string) ([]string, []string) {
		return redissonPSemKeys(s.name), []string{how, mode}
	})
}

// AvailablePermits returns the permits available (0 when the semaphore
// does not exist), as Java's availablePermits: it first reclaims the
// permits whose lease is over, and wakes the waiters if it did.
// redisync.ErrWrongType when NAME or {NAME}:timeout holds something else; an error
// from Redis or the connection, or ctx's end, is returned as it comes.
func (s *PermitExpirableSemaphore) AvailablePermits(ctx context.Context) (int64, error) {
	return s.count(ctx, "available")
}

// AcquiredPermits returns the permits taken and not yet given back, as
// Java's acquiredPermits; expired ones are reclaimed first. Errors as
// AvailablePermits.
func (s *PermitExpirableSemaphore) AcquiredPermits(ctx context.Context) (int64, error) {
	return s.count(ctx, "acquired")
}

// Permits returns the permits available and acquired together (0 when the
// semaphore has no value), as Java's getPermits; expired ones are
// reclaimed first. Errors as AvailablePermits.
func (s *PermitExpirableSemaphore) Permits(ctx context.Context) (int64, error) {
	return s.count(ctx, "permits")
}

// set runs the set script in mode with n.
func (s *PermitExpirableSemaphore) set(ctx context.Context, mode string, n int64) (int64, error) {
	return runOn(ctx, s, redissonPSemSetScript, "set Redisson permit expirable semaphore", func(how string) ([]string, []string) {
		return redissonPSemKeys(s.name), []string{how, mode, strconv.FormatInt(n, 10)}
	})
}

// TrySetPermits sets the permits available when the semaphore has no
// value yet (NAME does not exist), as Java's trySetPermits, wakes its
// waiters, and reports whether it set them. n must not be negative
// (redisync.ErrInvalidArgument). Errors as AvailablePermits.
func (s *PermitExpirableSemaphore) TrySetPermits(ctx context.Context, n int64) (bool, error) {
	if n < 0 {
		return false, fmt.Errorf("%w: %d permits", redisync.ErrInvalidArgument, n)
	}
	v, err := s.set(ctx, "try", n)
	return v == 1, err
}

// SetPermits makes the permits available and acquired add up to n, as
// Java's setPermits does: it adds the difference to the permits
// available, which can leave fewer than none available while more are
// acquired. It wakes the waiters and returns the permits available after.
// n must not be negative (redisync.ErrInvalidArgument). Errors as AvailablePermits.
func (s *PermitExpirableSemaphore) SetPermits(ctx context.Context, n int64) (int64, error) {
	if n < 0 {
		return 0, fmt.Errorf("%w: %d permits", redisync.ErrInvalidArgument, n)
	}
	return s.set(ctx, "set", n)
}

// AddPermits adds n permits available (takes them away when n is
// negative, which can leave fewer than none), as Java's addPermits, wakes
// the waiters, and returns the permits available after. A semaphore that
// has no value starts from 0. Errors as AvailablePermits.
func (s *PermitExpirableSemaphore) AddPermits(ctx context.Context, n int64) (int64, error) {
	return s.set(ctx, "add", n)
}

// lease runs the lease script for one id.
func (s *PermitExpirableSemaphore) lease(ctx context.Context, mode, id string, d time.Duration) (int64, error) {
	ids, err := s.releaseArgs(ctx, []string{id})
	if err != nil {
		return 0, err
	}
	ms := strconv.FormatInt(d.Milliseconds(), 10)
	if d == NoLease {
		ms = "-1"
	}
	return runOn(ctx, s, redissonPSemLeaseScript, "lease of Redisson permit expirable semaphore", func(how string) ([]string, []string) {
		return redissonPSemKeys(s.name), []string{how, mode, ids[0], ms}
	})
}

// UpdateLeaseTime sets the lease of the permit id to d from now
// (NoLease: the permit never expires), as Java's updateLeaseTime,
// and reports whether the permit was held. The watchdog of a Go Lease
// holding the permit sets it back to the watchdog lease at its next pass:
// for a Lease's own permits, use Lease.Extend on a fixed lease. d must be
// NoLease or at least a millisecond, id 32 hex digits
// (redisync.ErrInvalidArgument). Errors as AvailablePermits.
func (s *PermitExpirableSemaphore) UpdateLeaseTime(ctx context.Context, id string, d time.Duration) (bool, error) {
	if d != NoLease && d < time.Millisecond {
		return false, fmt.Errorf("%w: lease %v: NoLease or at least a millisecond", redisync.ErrInvalidArgument, d)
	}
	v, err := s.lease(ctx, "update", id, d)
	return v == 1, err
}

// LeaseTime returns what is left of the lease of the permit id, as Java's
// getLeaseTime: NoLease for a permit that never expires, and
// redisync.ErrNotHeld for one that is not held (released, expired, never taken).
// id must be 32 hex digits (redisync.ErrInvalidArgument). Errors as
// AvailablePermits.
func (s *PermitExpirableSemaphore) LeaseTime(ctx context.Context, id string) (time.Duration, error) {
	v, err := s.lease(ctx, "get", id, 0)
	switch {
	case err != nil:
		return 0, err
	case v == -2:
		return 0, fmt.Errorf("%w: Redisson permit expirable semaphore %s: permit %s has been released, has expired or does not exist", redisync.ErrNotHeld, s.name, id)
	case v == -1:
		return NoLease, nil
	}
	return time.Duration(v) * time.Millisecond, nil
}

// PermitExpirableSemaphoreState is a snapshot of a semaphore in
// Redisson's RPermitExpirableSemaphore layout.
type PermitExpirableSemaphoreState struct {
	// Exists tells whether NAME exists (the permits were set).
	Exists bool
	// Available is the permits available, not counting expired permits
	// that are yet to be reclaimed.
	Available int64
	// TTL is NAME's remaining time to live; negative when it has no
	// expiry or does not exist.
	TTL time.Duration
	// Permits are the permits acquired, the nearest expiry first,
	// expired ones included until they are reclaimed.
	Permits []Permit
}

// Permit is one acquired permit of a Redisson permit expirable
// semaphore.
type Permit struct {
	// ID is the permit's id as Java shows it: 32 lowercase hex digits.
	ID string
	// Lease is what is left of its lease: NoLease for a permit
	// that never expires; 0 or less once it has expired.
	Lease time.Duration
	// Expired tells that its lease is over: it is no longer held, and the
	// next script to run on the semaphore gives it back.
	Expired bool
}

// Inspect reads the semaphore's state in one round trip, changing nothing:
// expired permits are listed, not reclaimed. Errors as AvailablePermits.
func (s *PermitExpirableSemaphore) Inspect(ctx context.Context) (PermitExpirableSemaphoreState, error) {
	if err := s.check(ctx); err != nil {
		return PermitExpirableSemaphoreState{}, err
	}
	return InspectPermitExpirableSemaphore(ctx, s.c.rc, s.name)
}

// InspectPermitExpirableSemaphore reads the state of the Redisson
// permit expirable semaphore of the given name through rc, changing
// nothing: what `redisync inspect` shows. A name whose keys hold something
// else (NAME anything but a string holding an integer, {NAME}:timeout
// anything but a zset of 16-byte members) is redisync.ErrWrongType; a name with no
// semaphore is a state with Exists false and no permits.
func InspectPermitExpirableSemaphore(ctx context.Context, rc rueidis.Client, name string) (PermitExpirableSemaphoreState, error) {
	var st PermitExpirableSemaphoreState
	if rc == nil || ctx == nil || name == "" {
		return st, fmt.Errorf("%w: nil client or context, or empty name", redisync.ErrInvalidArgument)
	}
	res, err := redissonPSemInspectScript.Exec(ctx, rc, redissonPSemKeys(name)[:2], nil).ToArray()
	if err != nil {
		return st, redisErr("inspect Redisson permit expirable semaphore "+name, err)
	}
	if len(res) < 4 || len(res)%2 != 0 {
		return st, fmt.Errorf("redisync: inspect Redisson permit expirable semaphore: unexpected reply of %d elements", len(res))
	}
	var head [4]int64
	for i := range head {
		head[i], _ = res[i].AsInt64()
	}
	st.Exists, st.Available, st.TTL = head[0] == 1, head[1], time.Duration(head[2])*time.Millisecond
	now := head[3]
	for i := 4; i < len(res); i += 2 {
		member, _ := res[i].ToString()
		score, _ := res[i+1].AsFloat64()
		if len(member) != 16 {
			return PermitExpirableSemaphoreState{}, fmt.Errorf("%w: %s holds a member of %d bytes, not a Redisson permit id", redisync.ErrWrongType, redissonSuffixName(name, "timeout"), len(member))
		}
		p := Permit{ID: hex.EncodeToString([]byte(member)), Lease: NoLease}
		if score < redissonNoLeaseScore {
			left := int64(score) - now
			p.Lease, p.Expired = time.Duration(left)*time.Millisecond, left <= 0
		}
		st.Permits = append(st.Permits, p)
	}
	return st, nil
}
