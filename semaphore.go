package redisync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

const (
	// maxPermits bounds sizes, permit counts and latch counts: the scripts
	// compute with Lua numbers, which are doubles.
	maxPermits = 1 << 48
	// semWaiterExpiry is how long a semaphore waiter that stopped coming
	// back (its process died, its connection broke) keeps its place in the
	// queue. Live waiters renew their place every third of it.
	semWaiterExpiry = 3 * time.Second
)

// Semaphore is a distributed counting semaphore with leased permits. It is
// a cheap handle, safe for concurrent use: make one per use or share one.
//
// # Size
//
// The size (the number of permits) is stored in Redis, without expiry:
// TrySetSize sets it if the semaphore has none, SetSize and AddSize adjust
// it. Acquiring from a semaphore without a size fails with ErrNoSize (and
// ErrInvalidArgument) at once, as does asking for more permits than the
// size; a waiter learns it when the size is lowered below what it asks for.
// A Redis server without persistence loses the size when it restarts: set
// it again, for instance with TrySetSize before acquiring. Delete removes
// the semaphore.
//
// # Leases
//
// Each acquisition of n permits is one Lease with the contract of a Mutex
// lease: renewed by the Client's watchdog (the lock's own lease with
// WithRenewedLease, or a fixed lease, WithFixedLease),
// Lost and Err when it ends otherwise than by Unlock, Unlock to give the
// permits back (ErrNotHeld the second time). A holder that dies gives its
// permits back when its lease runs out: holders' expiries are the Redis
// server's time, every script first drops the holders whose lease is over,
// and a waiter whose permits are held looks again when the earliest lease
// would end, so no other operation needs to run. Semaphore leases carry no
// fencing token (Token is 0), and their Context does not re-enter: every
// acquisition takes permits of its own.
//
// # Fairness
//
// Permits are granted in FIFO order. A call that cannot have its permits
// at once takes a place at the tail of the semaphore's queue; it is granted
// its n permits only when they fit in the available permits together with
// the permits of every waiter queued before it. So permits released while a
// large acquisition waits at the head are kept for it, however many small
// acquisitions arrive: none of them passes it, and it waits no longer than
// it takes the holders before it to give back enough permits. Waiters
// behind the head whose permits fit as well are granted at the same time,
// not one after the other. A newcomer is granted at once only if its
// permits fit together with those of every queued waiter. TryLock respects
// the queue too: it fails while the permits it asks for are promised to
// waiters.
//
// Releases wake exactly the waiters that can now be granted, by name, each
// on its Client's channel of the semaphore. A waiter whose context ends
// leaves the queue at once; one whose process died is passed over once its
// place expires, 3s after it last renewed it.
//
// # Redis layout
//
// For a name with hash tag T (see Mutex): prefix:sem:T, a hash holding the
// size, the permits held and the last ticket handed to a waiter, without
// expiry; prefix:semh:T, a sorted set of holders (member "owner:n", score
// the lease's end in server milliseconds); prefix:semq:T and prefix:semqt:T,
// the waiters' queue ordered by arrival and their places' expiries; the
// channels prefix:semch:T:<client id>, one per waiting Client. The holders
// and queue keys expire on their own with their last member.
type Semaphore struct {
	c    *Client
	name string
	keys semKeys
	cfg  lockConfig
	err  error // invalid name or option
}

// semKeys are the Redis names of one semaphore. They share a hash tag.
type semKeys struct {
	sem       string // hash: size, used, seq
	holders   string // zset: member -> lease end (server ms)
	queue     string // zset: member -> ticket
	deadlines string // zset: member -> queue place expiry (server ms)
	channel   string
}

func (c *Client) semKeysFor(name string) semKeys {
	return semKeys{
		sem:       c.key("sem", name),
		holders:   c.key("semh", name),
		queue:     c.key("semq", name),
		deadlines: c.key("semqt", name),
		channel:   c.key("semch", name),
	}
}

// list is the KEYS of the semaphore scripts.
func (k semKeys) list() []string {
	return []string{k.sem, k.holders, k.queue, k.deadlines}
}

// semaphoreKind is the kind of Semaphore holders: one per acquisition, its
// owner the member "owner:n" of the holders set.
var semaphoreKind = &leaseKind{
	primitive: "semaphore",
	renew:     semRenewScript,
	release:   semReleaseScript,
	releaseAll: func(h *holder) rueidis.LuaExec {
		k := h.c.semKeysFor(h.name)
		return rueidis.LuaExec{Keys: k.list(), Args: []string{h.owner, k.channel}}
	},
	unlock: func(ctx context.Context, h *holder, _ string) (releaseState, error) {
		return h.c.semRelease(ctx, h.c.semKeysFor(h.name), h.owner)
	},
}

// Semaphore returns the semaphore with the given name. Names are as for
// Mutex; a Semaphore and a Mutex of the same name are unrelated. The only
// options are WithFixedLease and WithRenewedLease. An invalid name or
// option, or another option, is reported by every method, as
// ErrInvalidArgument.
func (c *Client) Semaphore(name string, opts ...LockOption) *Semaphore {
	s := &Semaphore{c: c, name: name}
	if s.cfg, s.err = newLockConfig(c, "Semaphore", name, lockConfig{}, optFixedLease|optRenewedLease, opts); s.err == nil {
		s.keys = c.semKeysFor(name)
	}
	return s
}

// checkN checks a number of permits to acquire.
func (s *Semaphore) checkN(ctx context.Context, n int) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return countIn(n, 1, "%d permits: acquire between 1 and 2^48")
}

func (s *Semaphore) noSize() error {
	return errorf("%w: %w: %q (set it with TrySetSize)", ErrInvalidArgument, ErrNoSize, s.name)
}

// TrySetSize sets the semaphore's size to size if it has none, and reports
// whether it did. size must be between 1 and 2^48 (ErrInvalidArgument).
// Errors are from Redis or ctx; a key of the semaphore holding something
// else gives ErrWrongType.
func (s *Semaphore) TrySetSize(ctx context.Context, size int) (bool, error) {
	if err := s.checkSize(ctx, size); err != nil {
		return false, err
	}
	code, _, _, err := s.size(ctx, "nx", size)
	return code == 1, err
}

// SetSize sets the semaphore's size, whatever it was, and returns the
// previous size (0 when it had none). Permits held stay held: after
// shrinking, Available may be negative until enough are given back.
// Waiters that can now be granted are woken, and waiters asking for more
// than the new size fail with ErrInvalidArgument. size must be between 1
// and 2^48. Errors are as for TrySetSize.
func (s *Semaphore) SetSize(ctx context.Context, size int) (prev int, err error) {
	if err := s.checkSize(ctx, size); err != nil {
		return 0, err
	}
	_, prev, _, err = s.size(ctx, "set", size)
	return prev, err
}

// AddSize changes the semaphore's size by delta, atomically, and returns
// the new size. It fails with ErrInvalidArgument, changing nothing, when
// the size would leave 1..2^48, and with ErrNoSize when the semaphore has
// none. Waiters are woken as by SetSize. Other errors are as for
// TrySetSize.
func (s *Semaphore) AddSize(ctx context.Context, delta int) (size int, err error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	if delta < -maxPermits || delta > maxPermits {
		return 0, fmt.Errorf("%w: size change %d out of range", ErrInvalidArgument, delta)
	}
	code, prev, next, err := s.size(ctx, "add", delta)
	switch {
	case err != nil:
		return 0, err
	case code == -2:
		return 0, s.noSize()
	case code == -1:
		return prev, fmt.Errorf("%w: adding %d to the size %d of semaphore %q", ErrInvalidArgument, delta, prev, s.name)
	}
	return next, nil
}

func (s *Semaphore) checkSize(ctx context.Context, size int) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return countIn(size, 1, "semaphore size %d: it must be between 1 and 2^48")
}

// countIn returns nil when n is between least and maxPermits, and
// otherwise ErrInvalidArgument with format, a description of n.
func countIn(n, least int, format string) error {
	if n < least || n > maxPermits {
		return fmt.Errorf("%w: "+format, ErrInvalidArgument, n)
	}
	return nil
}

// size runs the size script: {code, prev, new}.
func (s *Semaphore) size(ctx context.Context, mode string, v int) (code, prev, next int, err error) {
	res, err := semSizeScript.exec(ctx, s.c.rc, s.keys.list(),
		[]string{mode, strconv.Itoa(v), strconv.Itoa(maxPermits), s.keys.channel}).AsIntSlice()
	if err != nil {
		return 0, 0, 0, redisErr("semaphore size", err)
	}
	if len(res) == 1 {
		return int(res[0]), 0, 0, nil
	}
	if len(res) != 3 {
		return 0, 0, 0, fmt.Errorf("redisync: semaphore size: unexpected reply of %d elements", len(res))
	}
	return int(res[0]), int(res[1]), int(res[2]), nil
}

// Lock acquires n permits, waiting as long as ctx allows, in FIFO order
// with the other waiters (see Semaphore).
//
// It returns ErrInvalidArgument for n < 1 or n larger than the size (also
// when the size is lowered below n while it waits), ErrNoSize (with
// ErrInvalidArgument) when the semaphore has no size, an error naming the
// semaphore that matches both ctx.Err() and ErrNoPermits (see ErrLocked)
// when ctx ends first, and ErrClosed when the Client is closed. Connection errors do
// not end the wait: Lock retries them with backoff (up to a second apart)
// until ctx ends, then returns ctx's error wrapping the last of them.
// Errors Redis replies with are returned at once. Whenever Lock returns an
// error nothing stays held and its place in the queue is given up: if ctx
// ended while an attempt was on its way to Redis, Lock waits for its
// outcome and undoes it (half a second at most for each) before returning;
// while Redis cannot be reached, the undoing goes on in the background
// (Close waits for it).
func (s *Semaphore) Lock(ctx context.Context, n int) (*Lease, error) {
	return lockHandle(ctx, permits{s, n}, false)
}

// TryLock makes a single attempt to acquire n permits. It returns
// ErrNoPermits (which matches ErrLocked) when they are held or promised to
// queued waiters, other errors as Lock does (connection errors at once),
// and never queues.
func (s *Semaphore) TryLock(ctx context.Context, n int) (*Lease, error) {
	return lockHandle(ctx, permits{s, n}, true)
}

// Acquire acquires n permits in the background, as Lock does, and
// delivers one Lease on the returned channel, then closes it. Select on it
// together with other channels; to give up, cancel ctx.
//
// Receive the Lease, or end ctx: unlike golang.org/x/sync/semaphore's
// Acquire, this one does not wait, and called as a statement it takes the
// permits and holds them until ctx ends.
//
// The Lease reports failure through Err (ctx's error, ErrClosed, bad input,
// a Redis error), never by a nil Lease. It is claimed by its first use (Err,
// Lost, Unlock, Context, Token): if ctx ends before that, the permits are
// given back and the Lease reports ctx's error. So check Err first: nil
// means held.
func (s *Semaphore) Acquire(ctx context.Context, n int) <-chan *Lease {
	return acquireHandle(ctx, permits{s, n})
}

// permits is an acquisition of n permits of s, as a handle.
type permits struct {
	s *Semaphore
	n int
}

func (p permits) check(ctx context.Context) error { return p.s.checkN(ctx, p.n) }

func (p permits) acquire(ctx context.Context, try bool) (*Lease, error) {
	return p.s.acquire(ctx, p.n, try)
}

func (p permits) spans() []*Client { return []*Client{p.s.c} }

// acquire runs the acquisition loop for n permits.
func (s *Semaphore) acquire(ctx context.Context, n int, try bool) (*Lease, error) {
	c := s.c
	member := c.newOwner() + ":" + strconv.Itoa(n)
	lease := s.cfg.lease(c)
	queue := "1"
	if try {
		queue = "0"
	}
	args := []string{member, strconv.Itoa(n), strconv.FormatInt(lease.Milliseconds(), 10), queue,
		strconv.FormatInt(semWaiterExpiry.Milliseconds(), 10), s.keys.channel}
	// pending: Redis may hold permits for member that no Lease owns (the
	// outcome of the last attempt is unknown).
	pending := false
	a := acquisition{
		c: c, primitive: semaphoreKind.primitive, name: s.name,
		channel: s.keys.channel, key: s.keys.sem, busy: ErrNoPermits, target: member,
		attempt: func(ctx context.Context) (*Lease, time.Duration, error) {
			sent := time.Now()
			pending = true
			res, err := s.attempt(ctx, args)
			if err != nil {
				return nil, 0, err
			}
			code, val, err := parseSemAcquire(res)
			if err != nil {
				return nil, 0, err
			}
			pending = false
			switch code {
			case 1:
				l, err := c.grant(ctx, grant{kind: semaphoreKind, name: s.name, keys: lockKeys{lock: s.keys.sem, channel: s.keys.channel},
					key: s.keys.holders, owner: member, lease: lease, watchdog: s.cfg.fixedLease == 0, sent: sent})
				return l, 0, err
			case 0:
				// Come back before the queue place expires, or when the
				// earliest lease ends: its holder may have died.
				wait := semWaiterExpiry / 3
				if val >= 0 {
					wait = min(wait, time.Duration(val)*time.Millisecond+time.Millisecond)
				}
				return nil, wait, nil
			case -1:
				return nil, 0, fmt.Errorf("%w: %d permits asked of semaphore %q of size %d", ErrInvalidArgument, n, s.name, val)
			default: // -2
				return nil, 0, s.noSize()
			}
		},
		// The release script also gives up a queue place.
		undo:  func(ctx context.Context) { s.release(ctx, member) },
		leave: func(ctx context.Context) { s.release(ctx, member) },
	}
	l, err := a.run(ctx, try)
	if err != nil && try && pending {
		// A single attempt does not undo a failure whose outcome is
		// unknown.
		s.releaseAbandoned(ctx, member)
	}
	return l, err
}

// attempt runs the acquire script once, and the WAIT that WithReplicaAck
// asks for.
func (s *Semaphore) attempt(ctx context.Context, args []string) ([]rueidis.RedisMessage, error) {
	member := args[0]
	undo := func(ctx context.Context) { s.releaseAbandoned(ctx, member) }
	return s.c.runAcquire(ctx, semAcquireScript, "semaphore acquire", s.keys.list(), args, func(res []rueidis.RedisMessage) bool {
		code, _, _ := parseSemAcquire(res)
		return code == 1
	}, undo, undo)
}

// parseSemAcquire reads the acquire script's reply: {1}, {0, wait,
// queued}, {-1, size} or {-2}.
func parseSemAcquire(res []rueidis.RedisMessage) (code, val int64, err error) {
	if len(res) == 0 {
		return 0, 0, errors.New("redisync: semaphore acquire: empty reply")
	}
	if code, err = res[0].AsInt64(); err != nil {
		return 0, 0, fmt.Errorf("redisync: semaphore acquire: %w", err)
	}
	if len(res) > 1 {
		if val, err = res[1].AsInt64(); err != nil {
			return 0, 0, fmt.Errorf("redisync: semaphore acquire: %w", err)
		}
	}
	if code < -2 || code > 1 {
		return 0, 0, fmt.Errorf("redisync: semaphore acquire: unexpected reply %d", code)
	}
	return code, val, nil
}

// releaseAbandoned gives back what member may hold or wait for, for an
// acquisition the caller will not get (see Client.cleanup).
func (s *Semaphore) releaseAbandoned(ctx context.Context, member string) {
	s.c.cleanup(ctx, func(ctx context.Context) { s.release(ctx, member) })
}

// release gives back what member may hold or wait for, with ctx as it is.
func (s *Semaphore) release(ctx context.Context, member string) {
	if _, err := s.c.semRelease(ctx, s.keys, member); err != nil {
		s.c.log.Warn("redisync: could not undo an acquisition whose outcome is unknown; if it took anything, that expires with its lease", "key", s.keys.sem, "err", err)
	}
}

// semRelease runs the release script for member.
func (c *Client) semRelease(ctx context.Context, k semKeys, member string) (releaseState, error) {
	return c.runRelease(ctx, semReleaseScript, "semaphore release", k.list(), []string{member, k.channel})
}

// SemaphoreState is a snapshot of a semaphore in Redis.
type SemaphoreState struct {
	// Size is the number of permits; 0 when the semaphore has none.
	Size int
	// Acquired is the number of permits held by live holders.
	Acquired int
	// Available is Size - Acquired: negative after the size was lowered
	// below the permits held. Permits available may still be promised to
	// queued waiters.
	Available int
	// Holders are the live holders, soonest lease end first.
	Holders []SemaphoreHolder
	// Waiters is the number of queued waiters, and WaitingPermits the
	// permits they ask for together.
	Waiters        int
	WaitingPermits int
}

// SemaphoreHolder is one acquisition of permits.
type SemaphoreHolder struct {
	// Owner is the acquisition's owner id: the Client's ID, a colon and a
	// sequence number.
	Owner string
	// Permits is the number of permits it holds.
	Permits int
	// TTL is the remaining lease.
	TTL time.Duration
}

// ClientID returns the id of the Client that holds the permits.
func (h SemaphoreHolder) ClientID() string {
	return clientIDOf(h.Owner)
}

// Inspect reads the semaphore's state in one round trip. Holders whose
// lease is over are dropped first (and waiters that can then be granted
// woken), so the counts never include them. Errors are from Redis or ctx,
// ErrWrongType for a key holding something else.
func (s *Semaphore) Inspect(ctx context.Context) (SemaphoreState, error) {
	if err := s.check(ctx); err != nil {
		return SemaphoreState{}, err
	}
	res, err := semInspectScript.exec(ctx, s.c.rc, s.keys.list(), []string{s.keys.channel}).ToArray()
	if err != nil {
		return SemaphoreState{}, redisErr("semaphore inspect", err)
	}
	if len(res) != 5 {
		return SemaphoreState{}, errors.New("redisync: semaphore inspect: unexpected reply")
	}
	var st SemaphoreState
	ints := make([]int64, 5)
	for _, i := range []int{0, 1, 3, 4} {
		if ints[i], err = res[i].AsInt64(); err != nil {
			return SemaphoreState{}, fmt.Errorf("redisync: semaphore inspect: %w", err)
		}
	}
	st.Size, st.Acquired, st.Waiters, st.WaitingPermits = int(ints[0]), int(ints[1]), int(ints[3]), int(ints[4])
	st.Available = st.Size - st.Acquired
	holders, err := res[2].ToArray()
	if err != nil {
		return SemaphoreState{}, fmt.Errorf("redisync: semaphore inspect: %w", err)
	}
	for i := 0; i+1 < len(holders); i += 2 {
		member, _ := holders[i].ToString()
		pttl, _ := holders[i+1].AsInt64()
		h := SemaphoreHolder{Owner: member, TTL: time.Duration(pttl) * time.Millisecond}
		if j := strings.LastIndexByte(member, ':'); j >= 0 {
			h.Owner = member[:j]
			h.Permits, _ = strconv.Atoi(member[j+1:])
		}
		st.Holders = append(st.Holders, h)
	}
	return st, nil
}

// Delete removes the semaphore from Redis: its size, holders and queue. It
// reports whether the semaphore had a size. Waiters fail with ErrNoSize;
// holders' leases report ErrExpired at their next renewal, within a third
// of the watchdog lease. For operators and tests: live holders lose their
// permits. Errors are as for Inspect.
func (s *Semaphore) Delete(ctx context.Context) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	return s.c.runFound(ctx, semDeleteScript, "semaphore delete", s.keys.list(), []string{s.keys.channel})
}
