package redisync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Group is an all-of lock: one Lease that holds every one of several
// Mutexes, or nothing. The Mutexes may come from different Clients, and so
// from different Redis deployments. A name held through a group is held
// exactly as a Mutex of that name holds it: a Mutex or another group of the
// same name on the same deployment waits for the group, and the group waits
// for them. A Group is a cheap handle, safe for concurrent use.
//
// How the locks are taken:
//
//   - When every lock lives on one Client and in one slot (always on a
//     standalone server or through Sentinel; on a Cluster when the names
//     share a hash tag, such as "{order:42}:items" and "{order:42}:payment"),
//     one script takes all of them or none, in one round trip. While one of
//     them is held by another owner the group holds nothing: it waits for
//     the release of that lock (announced on its channel, as for Mutex, or
//     the holder's remaining lease), then tries again.
//   - Otherwise the locks are taken one at a time in a canonical order (by
//     Redis key, then by the addresses of the deployment, then by Client),
//     each waited for as Mutex.Lock waits, keeping those already taken.
//     Every group takes its locks in that same order and a Mutex holds one
//     lock, so overlapping groups never deadlock one another. Two locks with
//     the same key on different deployments are ordered by the addresses of
//     their servers as the Clients know them: configure every process alike.
//
// Whenever Lock or TryLock returns an error, or Acquire delivers a failed
// Lease, nothing is held: what was taken was released first.
//
// The group's Lease has the contract of a Mutex lease:
//
//   - Lost closes when any member is lost (its key expired or was deleted,
//     another owner holds it, its renewal failed, its Client was closed).
//     Err and the cause of Context are that member's reason (ErrExpired,
//     ErrTakenOver, ErrConnectionLost, ErrClosed) with its name. The other
//     members are released at once, so that nothing stays held for a group
//     that ended.
//   - Unlock releases every member: one script per Client and slot, all at
//     once. It returns nil when the group held every lock until then, and
//     ErrNotHeld when a member was not held any more or the group was lost
//     before (with the loss reason, whatever it was: unlike a Mutex lease
//     lost with its connection, whose key stays held until its Unlock, a
//     lost group released its members at the loss). After an error from
//     Redis or ctx some members may be released and others not: those are
//     no longer renewed and are freed by calling Unlock again, or expire.
//   - Context carries the lease and every member: a Mutex of one of the
//     names, or a group over some of them, acquired with it re-enters
//     instead of waiting. A group acquired with the Context of a Mutex lease
//     re-enters that lock too.
//   - Token is the group's fencing token T: one token for the whole group,
//     strictly greater than the token of every earlier ownership of each of
//     its names, and lower than the token of every later ownership of any of
//     them (the group raises the fencing counter of each name to T before
//     the Lease is returned). A resource guarded by any of the names, or by
//     all of them, checks T as it would check that name's token. Inspect of a
//     member shows the member's own token, which is at most T.
//   - Name is the names, quoted, in the order they are taken.
//
// Members keep their lease mode and duration: renewed by the watchdog of
// their Client (with their own lease under WithRenewedLease), or
// WithFixedLease, in which case the group lease ends with its earliest
// member (taken one at a time, each member's lease starts when it is taken).
//
// What it protects against, and what not: a group is exactly as safe as its
// members, each a Mutex lock on its deployment. A failover to a replica that
// had not received a lock (replication is asynchronous) frees that lock,
// and the group's exclusivity with it; WithReplicaAck narrows that window
// without closing it. Expiry runs on the servers' clocks and loss detection
// on the client's monotonic clock: a server clock that jumps forward expires
// a member early, and a process paused for longer than a lease (a long GC,
// SIGSTOP, a VM migration) resumes believing it holds locks that others
// hold, learning of the loss only afterwards. Where a second holder must
// never act, have the protected resource check the fencing token.
type Group struct {
	name    string
	ms      []*Mutex  // in acquisition order
	clients []*Client // distinct, in order of first use in ms
	atomic  bool      // one Client, one slot: taken by one script
	err     error
}

// NewGroup returns the group of the given locks. The order of the arguments
// does not matter. A nil or invalid Mutex, no Mutex at all, or one lock given
// twice (the same name through the same Client) makes every method fail with
// ErrInvalidArgument. Do not give the same lock twice through two Clients
// of one deployment: the group would wait for itself.
func NewGroup(locks ...*Mutex) *Group {
	g := &Group{}
	ms, err := canonicalOrder(locks)
	if err != nil {
		g.err = err
		return g
	}
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.name
		if !slices.Contains(g.clients, m.c) {
			g.clients = append(g.clients, m.c)
		}
	}
	g.ms, g.name = ms, fmt.Sprintf("%q", names)
	g.atomic = len(g.clients) == 1 && (!g.clients[0].cluster || oneSlot(ms))
	return g
}

// canonicalOrder checks the locks of a group and sorts them in the order
// every group takes them: by Redis key, then by the addresses of the
// deployment (for one key on several), then by Client.
func canonicalOrder(locks []*Mutex) ([]*Mutex, error) {
	if len(locks) == 0 {
		return nil, fmt.Errorf("%w: a group needs at least one lock", ErrInvalidArgument)
	}
	type entry struct {
		m      *Mutex
		deploy string
	}
	es := make([]entry, len(locks))
	seen := make(map[string]int, len(locks))
	type dupKey struct {
		c   *Client
		key string
	}
	dups := make(map[dupKey]bool, len(locks))
	for i, m := range locks {
		if err := mutexErr(m); err != nil {
			return nil, errorf("lock %d of the group: %w", i, err)
		}
		k := dupKey{m.c, m.keys.lock}
		if dups[k] {
			return nil, fmt.Errorf("%w: the lock %q appears twice in the group", ErrInvalidArgument, m.name)
		}
		dups[k] = true
		es[i].m = m
		seen[m.keys.lock]++
	}
	for i := range es {
		if seen[es[i].m.keys.lock] > 1 {
			es[i].deploy = deployment(es[i].m.c)
		}
	}
	slices.SortStableFunc(es, func(a, b entry) int {
		return cmp.Or(strings.Compare(a.m.keys.lock, b.m.keys.lock),
			strings.Compare(a.deploy, b.deploy), strings.Compare(a.m.c.id, b.m.c.id))
	})
	ms := make([]*Mutex, len(es))
	for i, e := range es {
		ms[i] = e.m
	}
	return ms, nil
}

// oneSlot reports whether the keys of the locks share one Cluster slot.
func oneSlot(ms []*Mutex) bool {
	slot := slotHash(ms[0].keys.lock)
	for _, m := range ms[1:] {
		if slotHash(m.keys.lock) != slot {
			return false
		}
	}
	return true
}

// mutexErr reports why m cannot take part in a group.
func mutexErr(m *Mutex) error {
	switch {
	case m == nil:
		return fmt.Errorf("%w: nil Mutex", ErrInvalidArgument)
	case m.err != nil:
		return m.err
	case m.c == nil:
		return fmt.Errorf("%w: Mutex not made by a Client", ErrInvalidArgument)
	}
	return nil
}

// deployment names the Redis deployment of c by the sorted addresses of its
// nodes: the same in every process configured alike.
func deployment(c *Client) string {
	nodes := c.rc.Nodes()
	addrs := make([]string, 0, len(nodes))
	for a := range nodes {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	return strings.Join(addrs, ",")
}

// Names returns the names of the group's locks in the order they are taken
// (nil for an invalid group).
func (g *Group) Names() []string {
	if g == nil || g.err != nil || len(g.ms) == 0 {
		return nil
	}
	names := make([]string, len(g.ms))
	for i, m := range g.ms {
		names[i] = m.name
	}
	return names
}

// Lock acquires every lock of the group, waiting as long as ctx allows.
//
// Errors are those of Mutex.Lock: when ctx ends first, an error naming the
// group (or the member it waited for) that matches both ctx's error and
// ErrLocked (wrapping the last connection error while retrying), ErrClosed when one of the
// group's Clients is closed (closing any of them ends the acquisition), an
// error Redis replied with at once. Whenever it returns an error the group
// holds nothing: what it took was released first.
func (g *Group) Lock(ctx context.Context) (*Lease, error) { return lockHandle(ctx, g, false) }

// TryLock makes a single attempt. It returns ErrLocked, with the name of a
// lock another owner holds, when the group cannot be taken at once, and
// any error from Redis or the connection at once; nothing is held then.
func (g *Group) TryLock(ctx context.Context) (*Lease, error) { return lockHandle(ctx, g, true) }

// Acquire acquires the group in the background and delivers one Lease on
// the returned channel, then closes it, as Mutex.Acquire does: failure is a
// Lease whose Err is set, the Lease must be received or ctx ended, and a
// group acquired after ctx ended, or whose Lease was not used before ctx
// ended, is released. To give up, cancel ctx.
func (g *Group) Acquire(ctx context.Context) <-chan *Lease { return acquireHandle(ctx, g) }

// groupPrimitive is the primitive name of groups in Metrics. Their members
// count as "mutex" locks as well.
const groupPrimitive = "group"

func (g *Group) acquire(ctx context.Context, try bool) (l *Lease, err error) {
	start := time.Now()
	if !try {
		// A member's wait names that member already.
		defer func() { err = waitEnded(ctx, err, groupPrimitive, g.name, "", ErrLocked) }()
	}
	if g.atomic {
		l, err = g.acquireAtomic(ctx, try)
	} else {
		l, err = g.acquireOrdered(ctx, try)
	}
	if f := g.clients[0].cfg.metrics.Acquired; f != nil && l != nil {
		f(groupPrimitive, g.name, time.Since(start))
	}
	return l, err
}

// atomicAcquisition is an acquisition of a group of one Client and slot,
// whose acquire script takes every lock or none.
type atomicAcquisition struct {
	g          *Group
	try        bool
	start      time.Time
	ms         []*member
	keys, args []string // of the acquire script
	w          waitSet
	pause      backoff
	lastErr    error // the last error retried
}

// acquireAtomic takes a group of one Client and slot with one script per
// attempt, waiting between attempts for the lock that blocked it.
func (g *Group) acquireAtomic(ctx context.Context, try bool) (*Lease, error) {
	a := g.newAtomic(ctx, try)
	defer a.w.leave()
	for {
		a.w.mark()
		sent := time.Now()
		res, err := a.attempt(ctx)
		var reply groupReply
		if err == nil {
			if reply, err = parseGroupAcquire(res, len(a.ms)); err != nil {
				err = refusedReentry(a.ms[reply.blocker].parent, err)
			}
		}
		switch {
		case err != nil:
			if err := a.retry(ctx, err); err != nil {
				return nil, err
			}
		case reply.ok:
			return a.grant(ctx, reply, sent)
		default:
			if err := a.wait(ctx, reply); err != nil {
				return nil, err
			}
		}
	}
}

// newAtomic prepares the members and the acquire script's keys and
// arguments.
func (g *Group) newAtomic(ctx context.Context, try bool) *atomicAcquisition {
	n := len(g.ms)
	a := &atomicAcquisition{g: g, try: try, start: time.Now(), ms: make([]*member, n), pause: errorBackoff()}
	a.keys = make([]string, 0, 3*n)
	a.args = make([]string, 1, 1+4*n)
	if try {
		a.args[0] = "try"
	}
	for i, m := range g.ms {
		mb := newMember(ctx, m)
		a.ms[i] = mb
		a.keys = append(a.keys, m.keys.lock, m.keys.queue, m.keys.waiters)
		a.args = append(a.args, mb.owner, mb.hold, strconv.FormatInt(mb.ttl.Milliseconds(), 10))
	}
	// A member that re-enters a lease claims that lease's ownership as
	// Redis has it (its token), or the group is refused with its loss.
	for _, mb := range a.ms {
		a.args = append(a.args, parentTokenArg(mb.parent))
	}
	return a
}

// attempt runs the group acquire script once, and the WAIT that
// WithReplicaAck asks for.
func (a *atomicAcquisition) attempt(ctx context.Context) ([]rueidis.RedisMessage, error) {
	return a.g.clients[0].runAcquire(ctx, groupAcquireScript, "group acquire", a.keys, a.args, func(res []rueidis.RedisMessage) bool {
		if len(res) == 0 {
			return false
		}
		flag, _ := res[0].AsInt64()
		return flag == 1
	}, a.undo, a.undoLate)
}

// retry handles a failed attempt: it returns the error that ends the
// acquisition, or nil after a pause.
func (a *atomicAcquisition) retry(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ErrNotHeld) {
		a.undo(ctx)
		return ctxErr(ctx, a.lastErr)
	}
	if a.try || !transient(err) {
		if transient(err) {
			// A single attempt that failed on the connection may have
			// taken the locks before its reply was lost: take back what
			// it may have taken (see acquisition.run).
			a.g.clients[0].cleanupBounded(ctx, a.undo)
		}
		return err
	}
	a.g.clients[0].log.Warn("redisync: group acquire failed; retrying", "group", a.g.name, "err", err)
	a.lastErr = err
	if err := sleepAll(ctx, a.g.clients, a.pause.next()); err != nil {
		a.undo(ctx)
		if ctx.Err() != nil {
			return ctxErr(ctx, a.lastErr)
		}
		return err
	}
	return nil
}

// wait waits for the release of the lock that blocked the attempt, at most
// its remaining lease. A single attempt fails with ErrLocked instead. A
// wait that its timer ended while the lock was in fact released reports a
// lost wake-up (fellBack).
func (a *atomicAcquisition) wait(ctx context.Context, reply groupReply) error {
	c := a.g.clients[0]
	blocked := a.g.ms[reply.blocker]
	if a.try {
		return fmt.Errorf("%w: %q", ErrLocked, blocked.name)
	}
	a.w.keepOnly(c, blocked.keys.channel)
	if err := a.w.join(ctx, c, blocked.keys.channel, ownPubSub, blocked.keys.ownerProbe); err != nil {
		return err
	}
	timedOut, err := a.w.wait(ctx, a.g.clients, reply.wait)
	if timedOut {
		freeAfterTimer(ctx, c, &a.w, groupPrimitive, a.g.name, blocked.keys.lock)
	}
	return err
}

// grant turns a successful run of the acquire script, sent at sent, into
// the group's Lease: one Mutex lease per member, registered with the
// watchdog.
func (a *atomicAcquisition) grant(ctx context.Context, reply groupReply, sent time.Time) (*Lease, error) {
	c := a.g.clients[0]
	for i, mb := range a.ms {
		m := mb.m
		l, err := c.grant(ctx, grant{kind: mutexKind, name: m.name, keys: m.keys, key: m.keys.lock, parent: mb.parent, owner: mb.owner, hold: mb.hold,
			token: int64(reply.tokens[i]), lease: mb.ttl, watchdog: m.cfg.fixedLease == 0, sent: sent})
		if err != nil {
			a.undo(ctx)
			return nil, err
		}
		mb.lease, mb.token, mb.state = l, reply.tokens[i], memberHeld
	}
	if err := ctx.Err(); err != nil {
		a.undo(ctx)
		return nil, err
	}
	for _, mb := range a.ms {
		if err := mb.lease.Err(); err != nil {
			a.undo(ctx)
			if c.isClosed() {
				return nil, ErrClosed
			}
			return nil, errorf("lock %q of the group: %w", mb.m.name, err)
		}
	}
	return newGroupLease(ctx, groupPrimitive, c, a.g.name, a.ms, len(a.ms), reply.token, 0, a.start), nil
}

// undo releases what an attempt may have taken (all or none).
func (a *atomicAcquisition) undo(ctx context.Context) {
	for _, mb := range a.ms {
		if mb.state != memberHeld {
			mb.state = memberNone
		}
	}
	a.release(ctx, a.ms)
}

// undoLate releases, by owner id, what an attempt whose reply came after
// its caller gave up may have taken (all or none). It runs beside the
// acquisition, so it works on members of its own.
func (a *atomicAcquisition) undoLate(ctx context.Context) {
	ms := make([]*member, len(a.ms))
	for i, mb := range a.ms {
		ms[i] = &member{c: mb.c, m: mb.m, owner: mb.owner, hold: mb.hold}
	}
	a.release(ctx, ms)
}

// release releases ms, members of an acquisition that ends without the
// lease, and logs a failure (see Client.cleanup).
func (a *atomicAcquisition) release(ctx context.Context, ms []*member) {
	a.g.clients[0].cleanup(ctx, func(ctx context.Context) {
		releaseMembers(ctx, ms, 0)
		for _, mb := range ms {
			if mb.err != nil {
				a.g.clients[0].log.Error("redisync: release of an abandoned group acquisition failed; it expires with its lease", "group", a.g.name, "err", mb.err)
				break
			}
		}
	})
}

// groupReply is the group acquire script's reply: the tokens of a group
// taken, or the lock that blocked it and how long to wait for it at most.
type groupReply struct {
	ok      bool
	token   uint64   // T, the group's token
	tokens  []uint64 // each member's
	blocker int      // the index of the lock that blocked it
	wait    time.Duration
}

// parseGroupAcquire reads the group acquire script's reply: {1, T, token_1,
// ..., token_n} or {0, pttl, i}; {-1, why, i}, lock i's re-entry refused,
// is a *reentryRefusal, with i in blocker.
func parseGroupAcquire(res []rueidis.RedisMessage, n int) (groupReply, error) {
	bad := func(err error) (groupReply, error) {
		return groupReply{}, fmt.Errorf("redisync: group acquire: %w", err)
	}
	if len(res) < 3 {
		return groupReply{}, fmt.Errorf("redisync: group acquire: unexpected reply of %d elements", len(res))
	}
	flag, err := res[0].AsInt64()
	if err != nil {
		return bad(err)
	}
	if flag != 1 {
		pttl, err1 := res[1].AsInt64()
		i, err2 := res[2].AsInt64()
		if err := errors.Join(err1, err2); err != nil {
			return bad(err)
		}
		if i < 1 || int(i) > n {
			return groupReply{}, fmt.Errorf("redisync: group acquire: blocked by lock %d of %d", i, n)
		}
		if flag == -1 {
			return groupReply{blocker: int(i) - 1}, &reentryRefusal{reason: refusedStateErr(pttl)}
		}
		return groupReply{blocker: int(i) - 1, wait: time.Duration(pttl)*time.Millisecond + time.Millisecond}, nil
	}
	if len(res) != n+2 {
		return groupReply{}, fmt.Errorf("redisync: group acquire: %d tokens for %d locks", len(res)-2, n)
	}
	parse := func(m rueidis.RedisMessage) (uint64, error) {
		s, err := m.ToString()
		if err != nil {
			return 0, err
		}
		return strconv.ParseUint(s, 10, 64)
	}
	r := groupReply{ok: true, tokens: make([]uint64, n)}
	if r.token, err = parse(res[1]); err != nil {
		return bad(err)
	}
	for i := range r.tokens {
		if r.tokens[i], err = parse(res[i+2]); err != nil {
			return bad(err)
		}
	}
	return r, nil
}

// acquireOrdered takes the locks one at a time, in the group's order, each
// with the acquisition of its Mutex.
func (g *Group) acquireOrdered(ctx context.Context, try bool) (*Lease, error) {
	actx, stop := watchClosed(ctx, g.clients)
	defer stop()
	pause := errorBackoff()
	for {
		ms, token, err := g.takeInOrder(actx, try)
		if err == nil && actx.Err() == nil {
			return newGroupLease(ctx, groupPrimitive, g.clients[0], g.name, ms, len(ms), token, 0, time.Time{}), nil
		}
		g.clients[0].cleanup(ctx, func(ctx context.Context) {
			releaseMembers(ctx, ms, 0)
			logReleaseErr(g.clients[0], g.name, ms, "release of an abandoned group acquisition failed; it expires with its lease")
		})
		switch {
		case ctx.Err() != nil:
			if err == nil || !errors.Is(err, ctx.Err()) {
				return nil, ctx.Err()
			}
			return nil, err
		case context.Cause(actx) == ErrClosed:
			return nil, ErrClosed
		case try || !(transient(err) || errors.Is(err, ErrExpired)):
			return nil, err
		}
		// A lock was lost, or its fencing counter could not be raised,
		// while the group was being taken: start again.
		g.clients[0].log.Warn("redisync: group acquire failed; retrying", "group", g.name, "err", err)
		if err := sleepAll(actx, g.clients, pause.next()); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, ErrClosed
		}
	}
}

// takeInOrder takes the locks one at a time, in the group's order, and
// raises their fencing counters to the group's token, which it returns.
// On an error it returns the members taken so far.
func (g *Group) takeInOrder(ctx context.Context, try bool) ([]*member, uint64, error) {
	ms := make([]*member, 0, len(g.ms))
	for _, m := range g.ms {
		// In Redis: a group's members are not passed on locally.
		l, err := m.queued().acquire(ctx, try)
		if err != nil {
			if errors.Is(err, ErrLocked) && !errors.As(err, new(waitError)) {
				// A wait's error names the member already.
				err = fmt.Errorf("%w: %q", err, m.name)
			}
			return ms, 0, err
		}
		ms = append(ms, heldMember(m, l))
	}
	token, raised, err := raiseFences(ctx, ms, 0)
	for i, ok := range raised {
		if !ok && err == nil {
			err = fmt.Errorf("%w: lock %q of the group was lost while the group was taken", ErrExpired, ms[i].m.name)
		}
	}
	return ms, token, err
}
