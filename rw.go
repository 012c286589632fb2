package redisync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

const (
	// rwRegistration is how long the registration of a waiting writer, or of
	// a reader a writer keeps out, lasts after its last attempt. A waiter
	// that dies stops keeping others out within this time.
	rwRegistration = 3 * time.Second
	// rwRefresh is the longest a waiter sleeps between attempts, each of
	// which renews its registration.
	rwRefresh = time.Second
)

// rwKeys are the Redis names of one RWMutex. They share a hash tag.
type rwKeys struct {
	lockKeys              // lock: the writer hash; channel
	fence          string // hash: the write tokens' counter
	readers        string // zset of read shares, scored by expiry
	writersWaiting string // zset of waiting writers, scored by deadline
	readersWaiting string // zset of readers kept out by a writer
	passes         string // zset of waiting readers let in ahead of writers
}

// rwKeysFor names the keys of an RWMutex: prefix:KIND:T with kinds rw
// (writer), rwr (readers), rwwq and rwrq (waiting writers and readers),
// rwpass (passes), rwfence and rwch (the channel; a waiting writer is woken
// on its Client's own, rwch:T:<client id>).
func (c *Client) rwKeysFor(name string) rwKeys {
	return rwKeys{
		lockKeys:       lockKeys{lock: c.key("rw", name), channel: c.key("rwch", name)},
		fence:          c.key("rwfence", name),
		readers:        c.key("rwr", name),
		writersWaiting: c.key("rwwq", name),
		readersWaiting: c.key("rwrq", name),
		passes:         c.key("rwpass", name),
	}
}

// all is the KEYS of every RWMutex script, in the order rw_prelude.lua
// documents.
func (k rwKeys) all() []string {
	return []string{k.lock, k.readers, k.writersWaiting, k.readersWaiting, k.passes, k.fence}
}

// rwReadKind is the kind of RWMutex readers: one holder per read lease,
// renewed by moving its share's expiry in the readers zset.
var rwReadKind = &leaseKind{
	primitive: "rwmutex.read",
	renew:     rwRenewScript,
	release:   rwRUnlockScript,
	releaseAll: func(h *holder) rueidis.LuaExec {
		k := h.c.rwKeysFor(h.name)
		return rueidis.LuaExec{Keys: k.all(), Args: []string{h.owner, k.channel}}
	},
	unlock: func(ctx context.Context, h *holder, _ string) (releaseState, error) {
		return h.c.rwReleaseRead(ctx, h.c.rwKeysFor(h.name), h.owner)
	},
}

// rwWriteKind is the kind of RWMutex writers: the writer hash has an owner
// and a token as a Mutex lock has, so it renews the same way.
var rwWriteKind = &leaseKind{
	primitive: "rwmutex.write",
	tracked:   true,
	renew:     renewScript,
	release:   rwUnlockScript,
	releaseAll: func(h *holder) rueidis.LuaExec {
		k := h.c.rwKeysFor(h.name)
		return rueidis.LuaExec{Keys: k.all(), Args: h.c.rwWriteReleaseArgs(k, h.owner, "")}
	},
	unlock: func(ctx context.Context, h *holder, hold string) (releaseState, error) {
		return h.c.rwReleaseWrite(ctx, h.c.rwKeysFor(h.name), h.owner, hold)
	},
}

// RWMutex is a distributed reader/writer lock: any number of read leases
// at once, or one write lease alone. It is a cheap handle: make one per use
// or share one, from many goroutines.
//
// Writers are preferred, as with sync.RWMutex: once a writer waits, new
// readers wait behind it, so a stream of overlapping readers cannot starve
// writers. When the writer releases, the readers that waited for it go
// first: they get passes that keep the next writer out until they have
// used them, so a stream of writers cannot starve readers either. A
// waiter's claim lapses a few seconds after its last attempt (waiters look
// again at least every second), so a waiter that dies stops keeping others
// out within seconds.
//
// Every read lease has its own share with its own expiry, renewed by the
// watchdog (the lock's own lease with WithRenewedLease, or a fixed lease
// with WithFixedLease): the share of a reader
// that crashed expires after its lease even while other readers keep
// renewing theirs. A read lease is lost (Lost, Err) with ErrExpired when
// its share is gone from Redis (it ran out, ForceUnlock, a restart),
// ErrConnectionLost when the watchdog could not renew it in time, and
// ErrClosed when its Client closes. Write leases work as Mutex leases.
//
// Both sides are reentrant through a lease's Context:
//   - RLock with a read lease's context re-enters at once: it never waits
//     behind a writer, which would deadlock (that writer waits for the
//     reader). It gives a new read lease with a share of its own, so each
//     Unlock takes back one share. If the outer lease no longer holds,
//     it fails with ErrNotHeld.
//   - Lock with a write lease's context re-enters the write lock, as
//     Mutex does: the same ownership and token, one more hold.
//   - Downgrade: RLock with a write lease's context gives a read lease at
//     once, beside the write lease; the writer may then Unlock the write
//     lease and keep reading, with no writer in between.
//   - Upgrade is refused: Lock with a context that carries a read lease and
//     no write lease returns ErrUpgrade at once, instead of waiting for its
//     own read lease to go.
//
// Re-entries and downgrades keep the lease mode and duration of the outer
// lease; a read re-entry's share counts its lease from its own
// acquisition.
//
// Any other acquisition waits its turn, including RLock with a context that
// carries nothing: a goroutine that holds a read lease and calls RLock
// without that lease's context can deadlock behind a waiting writer, as
// recursive read locking of a sync.RWMutex does.
//
// Wake-ups: a writer's release wakes, with one message, every reader of
// every Client that waits for it (or, when no reader waits, one waiting
// writer); the release of the last read share wakes one waiting writer.
// Waiters also look again when what blocks them would expire, since a
// crashed holder publishes nothing.
//
// Tokens: a write lease's Token is a fencing token, as a Mutex's. A read
// lease's Token is the write epoch it reads: the token of the last write
// lease granted before it (0 when none is remembered, see
// WithFenceRetention). Read tokens are shared by readers and are not
// fencing tokens.
//
// In Metrics, read leases count as primitive "rwmutex.read" and write
// leases as "rwmutex.write".
type RWMutex struct {
	c    *Client
	name string
	keys rwKeys
	cfg  lockConfig
	err  error // invalid name or option
	// registration and refresh are rwRegistration and rwRefresh; tests
	// lengthen them.
	registration, refresh time.Duration
}

// RWMutex returns the reader/writer lock with the given name. Names are as
// for Mutex; an RWMutex and a Mutex of the same name are different locks.
// The options are WithFixedLease and WithRenewedLease, which apply to read
// and write leases alike. An invalid name or option, or another option, is reported by every
// method, as ErrInvalidArgument.
func (c *Client) RWMutex(name string, opts ...LockOption) *RWMutex {
	m := &RWMutex{c: c, name: name, registration: rwRegistration, refresh: rwRefresh}
	if m.cfg, m.err = newLockConfig(c, "RWMutex", name, lockConfig{}, optFixedLease|optRenewedLease, opts); m.err == nil {
		m.keys = c.rwKeysFor(name)
	}
	return m
}

// RLock acquires a read lease, waiting as long as ctx allows: while a
// writer holds the lock or waits for it (see RWMutex).
//
// It returns, when ctx ends first, an error naming the lock that matches
// both ctx.Err() and ErrLocked (see ErrLocked), and ErrClosed when the
// Client is closed. Connection errors do not end the wait: RLock retries them with
// backoff (up to a second apart) until ctx ends, then returns ctx's error
// wrapping the last of them. Errors Redis replies with (a key of the wrong
// type, a script error) are returned at once, and so is ErrNotHeld when ctx
// carries a lease of the lock that no longer holds it in Redis. Whenever
// RLock returns an error nothing is held and nothing is left waiting: an
// attempt whose outcome is unknown when ctx ends is waited for (half a
// second at most) and undone.
func (m *RWMutex) RLock(ctx context.Context) (*Lease, error) {
	return lockHandle(ctx, rwRead{m}, false)
}

// TryRLock makes a single attempt at a read lease. It returns ErrLocked
// when a writer holds the lock or waits for it, and any error from Redis or
// the connection at once.
func (m *RWMutex) TryRLock(ctx context.Context) (*Lease, error) {
	return lockHandle(ctx, rwRead{m}, true)
}

// RAcquire acquires a read lease in the background and delivers one Lease
// on the returned channel, then closes it; to give up, cancel ctx. As with
// Mutex.Acquire, the Lease must be received or ctx ended, failure is a
// Lease whose Err is set, never a nil Lease, and a Lease not yet used (Err,
// Lost, Unlock, Context, Token) when ctx ends is released and reports ctx's
// error.
func (m *RWMutex) RAcquire(ctx context.Context) <-chan *Lease { return acquireHandle(ctx, rwRead{m}) }

// Lock acquires the write lease, waiting as long as ctx allows: until no
// other writer holds it and every reader has left. While it waits, new
// readers wait behind it.
//
// Errors are as for RLock, and ErrUpgrade is returned at once when ctx
// carries a read lease of the lock but no write lease.
func (m *RWMutex) Lock(ctx context.Context) (*Lease, error) {
	return lockHandle(ctx, rwWrite{m}, false)
}

// TryLock makes a single attempt at the write lease. It returns ErrLocked
// when another writer or any reader holds the lock (or readers a writer's
// release let in have yet to come), ErrUpgrade as Lock does, and any error
// from Redis or the connection at once. It does not keep readers out.
func (m *RWMutex) TryLock(ctx context.Context) (*Lease, error) {
	return lockHandle(ctx, rwWrite{m}, true)
}

// Acquire acquires the write lease in the background and delivers one
// Lease on the returned channel, then closes it, as RAcquire does. An
// upgrade is delivered at once as a Lease whose Err is ErrUpgrade.
func (m *RWMutex) Acquire(ctx context.Context) <-chan *Lease { return acquireHandle(ctx, rwWrite{m}) }

// rwRead and rwWrite are the read and the write side of an RWMutex, as
// handles. A write acquisition with a context that carries only a read
// lease of the lock is refused (ErrUpgrade) before it starts.
type (
	rwRead  struct{ m *RWMutex }
	rwWrite struct{ m *RWMutex }
)

func (r rwRead) check(ctx context.Context) error { return r.m.check(ctx) }

func (r rwRead) acquire(ctx context.Context, try bool) (*Lease, error) { return r.m.rlock(ctx, try) }

func (r rwRead) spans() []*Client { return []*Client{r.m.c} }

func (w rwWrite) check(ctx context.Context) error {
	if err := w.m.check(ctx); err != nil {
		return err
	}
	return w.m.upgrade(ctx)
}

func (w rwWrite) acquire(ctx context.Context, try bool) (*Lease, error) { return w.m.lock(ctx, try) }

func (w rwWrite) spans() []*Client { return []*Client{w.m.c} }

// rwWriterKey finds, in a context, the innermost write lease of one
// RWMutex of one Client, through read leases layered on it.
type rwWriterKey struct {
	c    *Client
	lock string
}

// rwWriterBox carries a write lease in its own context: the lease is made
// after the context it carries.
type rwWriterBox struct{ l *Lease }

// writerFrom returns the live write lease ctx carries for the lock, if any.
func (m *RWMutex) writerFrom(ctx context.Context) *Lease {
	b, _ := ctx.Value(rwWriterKey{m.c, m.keys.lock}).(*rwWriterBox)
	if b == nil || b.l == nil || b.l.Err() != nil {
		return nil
	}
	return b.l
}

// upgrade refuses a write acquisition with a context that carries a live
// read lease and no live write lease.
func (m *RWMutex) upgrade(ctx context.Context) error {
	if m.writerFrom(ctx) != nil {
		return nil
	}
	if p := leaseFrom(ctx, m.c, m.keys.lockKeys); p != nil && p.h.kind == rwReadKind {
		return fmt.Errorf("%w: %q", ErrUpgrade, m.name)
	}
	return nil
}

// leaseMode is the lease of a new ownership and whether the watchdog
// renews it.
func (m *RWMutex) leaseMode() (time.Duration, bool) {
	return m.cfg.lease(m.c), m.cfg.fixedLease == 0
}

func rwMillis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// wait is how long a waiter sleeps, at most, after an attempt that found
// the lock taken for ms more milliseconds: until then, but no longer than
// the refresh interval, so that its registration stays fresh.
func (m *RWMutex) wait(ms int64) time.Duration {
	return min(time.Duration(max(ms, 0))*time.Millisecond+time.Millisecond, m.refresh)
}

// rlock runs a read acquisition.
func (m *RWMutex) rlock(ctx context.Context, try bool) (*Lease, error) {
	c := m.c
	id := c.newOwner()
	lease, watchdog := m.leaseMode()
	mode, parent, outer := "n", "", (*Lease)(nil)
	if try {
		mode = "t"
	}
	if p := leaseFrom(ctx, c, m.keys.lockKeys); p != nil && p.h.kind == rwReadKind {
		mode, outer = "r", p
	} else if w := m.writerFrom(ctx); w != nil {
		mode, outer = "d", w
	}
	if outer != nil {
		parent, lease, watchdog = outer.h.owner, outer.h.lease, outer.h.watchdog
	}
	args := []string{id, rwMillis(lease), mode, parent, rwMillis(m.registration)}
	undo := func(ctx context.Context) { m.releaseAbandoned(ctx, "read", id, "") }
	// A waiter leaving gives up its place among the waiting readers (and a
	// pass).
	a := m.acquisition(rwReadKind, rwRLockScript, "read lock", mode, outer, args, undo,
		func(ctx context.Context, val int64, sent time.Time) (*Lease, error) {
			return c.grant(ctx, grant{kind: rwReadKind, name: m.name, keys: m.keys.lockKeys, key: m.keys.readers, owner: id,
				token: val, lease: lease, watchdog: watchdog, sent: sent})
		})
	return a.run(ctx, try)
}

// lock runs a write acquisition.
func (m *RWMutex) lock(ctx context.Context, try bool) (*Lease, error) {
	c := m.c
	owner := c.newOwner()
	lease, watchdog := m.leaseMode()
	mode := "n"
	if try {
		mode = "t"
	}
	parent := m.writerFrom(ctx)
	if parent != nil {
		owner, mode, lease, watchdog = parent.h.owner, "r", parent.h.lease, parent.h.watchdog
	}
	hold := c.newHold()
	args := []string{owner, hold, rwMillis(lease), c.cfg.retentionArg, mode, rwMillis(m.registration)}
	undo := func(ctx context.Context) { m.releaseAbandoned(ctx, "write", owner, hold) }
	// A waiter leaving stops keeping readers out.
	a := m.acquisition(rwWriteKind, rwLockScript, "write lock", mode, parent, args, undo,
		func(ctx context.Context, val int64, sent time.Time) (*Lease, error) {
			// The write lease's context carries it for Lock and RLock to
			// find through read leases layered on it.
			box := &rwWriterBox{}
			lctx := context.WithValue(ctx, rwWriterKey{c, m.keys.lock}, box)
			l, err := c.grant(lctx, grant{kind: rwWriteKind, name: m.name, keys: m.keys.lockKeys, key: m.keys.lock, parent: parent, owner: owner, hold: hold,
				token: val, lease: lease, watchdog: watchdog, sent: sent})
			if err != nil {
				undo(ctx)
				return nil, err
			}
			box.l = l
			return l, nil
		})
	if mode == "n" {
		// Releases name the writer they wake.
		a.target = owner
	}
	return a.run(ctx, try)
}

// acquisition is a read or write acquisition of kind: each attempt runs
// s (op names it in errors) with args, and grant makes the lease of
// an attempt that took the lock, val being what the script answered. undo
// gives up what an abandoned attempt may have taken; a waiter that
// registered (mode "n") gives up its place with it when it leaves. parent
// is the lease a re-entry (modes "r" and "d") claims the ownership of.
func (m *RWMutex) acquisition(kind *leaseKind, s script, op, mode string, parent *Lease, args []string, undo func(context.Context),
	grant func(ctx context.Context, val int64, sent time.Time) (*Lease, error)) acquisition {
	registered := false
	return acquisition{
		c: m.c, primitive: kind.primitive, name: m.name,
		channel: m.keys.channel, key: m.keys.lock, busy: ErrLocked,
		attempt: func(ctx context.Context) (*Lease, time.Duration, error) {
			sent := time.Now()
			res, err := m.attempt(ctx, s, op, args, undo)
			if err != nil {
				return nil, 0, err
			}
			code, val, err := parseRW(res)
			switch {
			case err != nil:
				return nil, 0, err
			case code < 0 && parent != nil:
				// Redis no longer has the parent's ownership: the parent
				// lost it (the scripts do not tell why; the watchdog would
				// find it gone as well).
				return nil, 0, refusedReentry(parent, &reentryRefusal{reason: ErrExpired})
			case code < 0:
				return nil, 0, fmt.Errorf("%w: the outer lease of %q ended", ErrNotHeld, m.name)
			case code == 0:
				registered = registered || mode == "n"
				return nil, m.wait(val), nil
			}
			l, err := grant(ctx, val, sent)
			return l, 0, err
		},
		undo: undo,
		leave: func(ctx context.Context) {
			if registered {
				undo(ctx)
			}
		},
	}
}

// attempt runs an acquire script once, and the WAIT that WithReplicaAck
// asks for; a grant the replicas did not acknowledge is undone.
func (m *RWMutex) attempt(ctx context.Context, s script, op string, args []string, undo func(context.Context)) ([]rueidis.RedisMessage, error) {
	return m.c.runAcquire(ctx, s, op, m.keys.all(), args, func(res []rueidis.RedisMessage) bool {
		code, _, _ := parseRW(res)
		return code == 1
	}, undo, undo)
}

// parseRW reads an acquire script's reply: {1, token, ...} (granted),
// {0, ms} (blocked) or {-1} (the parent lease is gone).
func parseRW(res []rueidis.RedisMessage) (code, val int64, err error) {
	if len(res) < 1 {
		return 0, 0, errors.New("redisync: rw acquire: empty reply")
	}
	if code, err = res[0].AsInt64(); err != nil {
		return 0, 0, fmt.Errorf("redisync: rw acquire: %w", err)
	}
	switch {
	case code < 0:
		return code, 0, nil
	case len(res) < 2:
		return 0, 0, fmt.Errorf("redisync: rw acquire: unexpected reply of %d elements", len(res))
	case code == 0:
		val, err = res[1].AsInt64()
	default:
		var s string
		if s, err = res[1].ToString(); err == nil {
			val, err = strconv.ParseInt(s, 10, 64)
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("redisync: rw acquire: %w", err)
	}
	return code, val, nil
}

// releaseAbandoned releases what an acquisition the caller will not get
// may hold, and its place among the waiters (see Client.cleanup).
func (m *RWMutex) releaseAbandoned(ctx context.Context, side, owner, hold string) {
	m.c.cleanup(ctx, func(ctx context.Context) {
		var err error
		if side == "read" {
			_, err = m.c.rwReleaseRead(ctx, m.keys, owner)
		} else {
			_, err = m.c.rwReleaseWrite(ctx, m.keys, owner, hold)
		}
		if err != nil && !m.c.isClosed() {
			m.c.log.Warn("redisync: could not undo an acquisition whose outcome is unknown; if it took anything, that expires with its lease", "key", m.keys.lock, "side", side, "err", err)
		}
	})
}

// rwReleaseRead runs the read release script for one share.
func (c *Client) rwReleaseRead(ctx context.Context, k rwKeys, id string) (releaseState, error) {
	return c.runRelease(ctx, rwRUnlockScript, "read unlock", k.all(), []string{id, k.channel})
}

func (c *Client) rwWriteReleaseArgs(k rwKeys, owner, hold string) []string {
	return []string{owner, hold, c.cfg.retentionArg, k.channel}
}

// rwReleaseWrite runs the write release script for one hold ("" for every
// hold) of an owner.
func (c *Client) rwReleaseWrite(ctx context.Context, k rwKeys, owner, hold string) (releaseState, error) {
	return c.runRelease(ctx, rwUnlockScript, "write unlock", k.all(), c.rwWriteReleaseArgs(k, owner, hold))
}

// RWMutexState is a snapshot of an RWMutex in Redis.
type RWMutexState struct {
	// Readers is the number of live read shares: one per read lease,
	// re-entries and downgrades included. Shares whose lease ran out are
	// not counted.
	Readers int
	// ReadTTL is the time until the last read share expires unless renewed;
	// 0 without readers.
	ReadTTL time.Duration
	// WriteLocked reports whether a writer holds the lock.
	WriteLocked bool
	// Writer is the writer's owner id: the holding Client's ID, a colon and
	// a sequence number ("" without a writer).
	Writer string
	// WriteHolds is the number of holds of the writer (re-entries count).
	WriteHolds int
	// WriteTTL is the writer's remaining lease; negative when its key has no
	// expiry, 0 without a writer.
	WriteTTL time.Duration
	// Token is the writer's fencing token (0 without a writer).
	Token uint64
	// WritersWaiting is the number of writers waiting for the lock, which
	// keep new readers out.
	WritersWaiting int
}

// Free reports whether nobody holds the lock.
func (s RWMutexState) Free() bool { return !s.WriteLocked && s.Readers == 0 }

// WriterClientID returns the id of the Client that holds the write lock
// ("" when none does).
func (s RWMutexState) WriterClientID() string {
	return clientIDOf(s.Writer)
}

// Inspect reads the lock's state in one round trip. It returns
// ErrWrongType when one of the lock's keys holds a value the library did
// not write, and Redis and connection errors as they are.
func (m *RWMutex) Inspect(ctx context.Context) (RWMutexState, error) {
	if err := m.check(ctx); err != nil {
		return RWMutexState{}, err
	}
	res, err := rwInspectScript.exec(ctx, m.c.rc, m.keys.all(), nil).ToArray()
	if err != nil {
		return RWMutexState{}, redisErr("inspect", err)
	}
	if len(res) != 7 {
		return RWMutexState{}, errors.New("redisync: inspect: unexpected reply")
	}
	var st RWMutexState
	ints := make([]int64, len(res))
	for i, r := range res {
		ints[i], _ = r.AsInt64()
	}
	st.Writer, _ = res[0].ToString()
	tok, _ := res[1].ToString()
	st.Token, _ = strconv.ParseUint(tok, 10, 64)
	st.WriteHolds = int(ints[2])
	st.WriteLocked = st.Writer != ""
	if st.WriteLocked {
		st.WriteTTL = time.Duration(ints[3]) * time.Millisecond
	}
	st.Readers = int(ints[4])
	st.ReadTTL = time.Duration(ints[5]) * time.Millisecond
	st.WritersWaiting = int(ints[6])
	return st, nil
}

// ForceUnlock breaks the lock whoever holds it: the writer and every read
// share. Waiters stay waiting and are woken. It reports whether anybody
// held the lock. The holders' leases report ErrExpired at their next
// renewal, within a third of the watchdog lease. For operators: holders
// that are alive lose mutual exclusion.
func (m *RWMutex) ForceUnlock(ctx context.Context) (bool, error) {
	if err := m.check(ctx); err != nil {
		return false, err
	}
	return m.c.runFound(ctx, rwForceScript, "force unlock", m.keys.all(), []string{m.keys.channel})
}

// Locker returns a sync.Locker whose Lock takes the write lease and whose
// Unlock releases it (see Locker).
func (m *RWMutex) Locker() *Locker {
	var c *Client
	if m != nil {
		c = m.c
	}
	return newLocker(c, m.Name(), m.Lock)
}

// RLocker returns a sync.Locker whose Lock takes a read lease and whose
// Unlock releases one, as sync.RWMutex.RLocker does.
func (m *RWMutex) RLocker() *RLocker { return &RLocker{m: m} }
