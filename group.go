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
//     once. It returns nil when the group held every lock until then (also
//     after a loss that left the locks in place, as for Mutex), and
//     ErrNotHeld when a member was not held any more. After an error from
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
// Members keep their lease mode: renewed by the watchdog of their Client, or
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
	if len(locks) == 0 {
		g.err = fmt.Errorf("%w: a group needs at least one lock", ErrInvalidArgument)
		return g
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
			g.err = fmt.Errorf("lock %d of the group: %w", i, err)
			return g
		}
		k := dupKey{m.c, m.keys.lock}
		if dups[k] {
			g.err = fmt.Errorf("%w: the lock %q appears twice in the group", ErrInvalidArgument, m.name)
			return g
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
	names := make([]string, len(es))
	for i, e := range es {
		g.ms = append(g.ms, e.m)
		names[i] = e.m.name
		if !slices.Contains(g.clients, e.m.c) {
			g.clients = append(g.clients, e.m.c)
		}
	}
	g.name = fmt.Sprintf("%q", names)
	if len(g.clients) == 1 {
		g.atomic = true
		if c := g.clients[0]; c.cluster {
			slot := slotHash(g.ms[0].keys.lock)
			for _, m := range g.ms[1:] {
				if slotHash(m.keys.lock) != slot {
					g.atomic = false
				}
			}
		}
	}
	return g
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

func (g *Group) check(ctx context.Context) error {
	switch {
	case g == nil:
		return fmt.Errorf("%w: nil Group", ErrInvalidArgument)
	case g.err != nil:
		return g.err
	case len(g.ms) == 0:
		return fmt.Errorf("%w: Group not made by NewGroup", ErrInvalidArgument)
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	for _, c := range g.clients {
		if c.isClosed() {
			return ErrClosed
		}
	}
	return nil
}

// Lock acquires every lock of the group, waiting as long as ctx allows.
//
// Errors are those of Mutex.Lock: ctx's error when it ends first (wrapping
// the last connection error while retrying), ErrClosed when one of the
// group's Clients is closed (closing any of them ends the acquisition), an
// error Redis replied with at once. Whenever it returns an error the group
// holds nothing: what it took was released first.
func (g *Group) Lock(ctx context.Context) (*Lease, error) {
	if err := g.check(ctx); err != nil {
		return nil, err
	}
	return g.acquire(ctx, false)
}

// TryLock makes a single attempt. It returns ErrLocked, with the name of a
// lock another owner holds, when the group cannot be taken at once, and
// any error from Redis or the connection at once; nothing is held then.
func (g *Group) TryLock(ctx context.Context) (*Lease, error) {
	if err := g.check(ctx); err != nil {
		return nil, err
	}
	return g.acquire(ctx, true)
}

// Acquire acquires the group in the background and delivers one Lease on
// the returned channel, then closes it, as Mutex.Acquire does: failure is a
// Lease whose Err is set, and a group acquired after ctx ended or never
// received is released. To give up, cancel ctx.
func (g *Group) Acquire(ctx context.Context) <-chan *Lease {
	if err := g.check(ctx); err != nil {
		return (*Client)(nil).acquireAsync(ctx, err, nil)
	}
	return acquireMulti(ctx, g.clients, func(ctx context.Context) (*Lease, error) { return g.acquire(ctx, false) })
}

// groupPrimitive is the primitive name of groups in Metrics. Their members
// count as "mutex" locks as well.
const groupPrimitive = "group"

func (g *Group) acquire(ctx context.Context, try bool) (l *Lease, err error) {
	start := time.Now()
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

// acquireAtomic takes a group of one Client and slot with one script per
// attempt, waiting between attempts for the lock that blocked it.
func (g *Group) acquireAtomic(ctx context.Context, try bool) (*Lease, error) {
	start := time.Now()
	c := g.clients[0]
	n := len(g.ms)
	ms := make([]*member, n)
	keys := make([]string, 0, 4*n)
	args := make([]string, 2, 2+3*n)
	args[0] = strconv.FormatInt(c.cfg.fenceRetention.Milliseconds(), 10)
	if try {
		args[1] = "try"
	}
	for i, m := range g.ms {
		mb := newMember(ctx, m)
		ms[i] = mb
		keys = append(keys, m.keys.lock, m.keys.fence, m.keys.queue, m.keys.waiters)
		args = append(args, mb.owner, mb.hold, strconv.FormatInt(mb.ttl.Milliseconds(), 10))
	}
	// undo releases what an attempt may have taken (all or none).
	undo := func(ctx context.Context) {
		dctx, cancel := detached(ctx)
		defer cancel()
		for _, mb := range ms {
			if mb.state != memberHeld {
				mb.state = memberNone
			}
		}
		releaseMembers(dctx, ms, 0)
		for _, mb := range ms {
			if mb.err != nil {
				c.log.Error("redisync: release of an abandoned group acquisition failed; it expires with its lease", "group", g.name, "err", mb.err)
				break
			}
		}
	}
	var w waitSet
	defer w.leave()
	backoff := 10 * time.Millisecond
	var lastErr error
	for {
		sent := time.Now()
		res, err := g.attemptAtomic(ctx, keys, args, undo)
		var ok bool
		var token uint64
		var tokens []uint64
		var blocker int
		var wait time.Duration
		if err == nil {
			ok, token, tokens, blocker, wait, err = parseGroupAcquire(res, n)
		}
		if err != nil {
			w.passOn(nil, "")
			if ctx.Err() != nil {
				undo(ctx)
				return nil, ctxErr(ctx, lastErr)
			}
			if try || !transient(err) {
				return nil, err
			}
			c.log.Warn("redisync: group acquire failed; retrying", "group", g.name, "err", err)
			lastErr = err
			if err := sleepAll(ctx, g.clients, backoff); err != nil {
				undo(ctx)
				if ctx.Err() != nil {
					return nil, ctxErr(ctx, lastErr)
				}
				return nil, err
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		if ok {
			return g.grantAtomic(ctx, ms, tokens, token, start, sent, undo)
		}
		blocked := g.ms[blocker]
		w.passOn(c, blocked.keys.channel)
		if try {
			return nil, fmt.Errorf("%w: %q", ErrLocked, blocked.name)
		}
		if err := w.join(c, blocked.keys.channel); err != nil {
			return nil, err
		}
		if err := w.wait(ctx, g.clients, wait); err != nil {
			return nil, err
		}
	}
}

// attemptAtomic runs the group acquire script once, and the WAIT that
// WithReplicaAck asks for.
func (g *Group) attemptAtomic(ctx context.Context, keys, args []string, undo func(context.Context)) ([]rueidis.RedisMessage, error) {
	c := g.clients[0]
	actx, done := inflight(ctx)
	defer done()
	if c.cfg.ackReplicas == 0 {
		res, err := groupAcquireScript.exec(actx, c.rc, keys, args).ToArray()
		if err != nil {
			return nil, redisErr("group acquire", err)
		}
		return res, nil
	}
	res, acked, err := groupAcquireScript.execAndWait(actx, c.rc, keys, args, c.cfg.ackReplicas, c.cfg.ackTimeout)
	if err != nil {
		return nil, redisErr("group acquire", err)
	}
	if len(res) > 0 {
		if flag, _ := res[0].AsInt64(); flag == 1 && acked < int64(c.cfg.ackReplicas) {
			undo(ctx)
			return nil, fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, acked, c.cfg.ackReplicas, c.cfg.ackTimeout)
		}
	}
	return res, nil
}

// grantAtomic turns a successful group acquire script run into the group's
// Lease: one Mutex lease per member, registered with the watchdog.
func (g *Group) grantAtomic(ctx context.Context, ms []*member, tokens []uint64, token uint64, start, sent time.Time, undo func(context.Context)) (*Lease, error) {
	c := g.clients[0]
	for i, mb := range ms {
		m := mb.m
		l, err := c.grant(ctx, mutexKind, m.name, m.keys, m.keys.lock, mb.parent, mb.owner, mb.hold, int64(tokens[i]), mb.ttl, m.cfg.fixedLease == 0, sent)
		if err != nil {
			undo(ctx)
			return nil, err
		}
		mb.lease, mb.token, mb.state = l, tokens[i], memberHeld
	}
	if err := ctx.Err(); err != nil {
		undo(ctx)
		return nil, err
	}
	for _, mb := range ms {
		if err := mb.lease.Err(); err != nil {
			undo(ctx)
			if c.isClosed() {
				return nil, ErrClosed
			}
			return nil, fmt.Errorf("redisync: lock %q of the group: %w", mb.m.name, err)
		}
	}
	return newGroupLease(ctx, groupPrimitive, c, g.name, ms, len(ms), token, 0, start), nil
}

// parseGroupAcquire reads the group acquire script's reply: {1, T, token_1,
// ..., token_n} or {0, pttl, i}.
func parseGroupAcquire(res []rueidis.RedisMessage, n int) (ok bool, token uint64, tokens []uint64, blocker int, wait time.Duration, err error) {
	if len(res) < 3 {
		return false, 0, nil, 0, 0, fmt.Errorf("redisync: group acquire: unexpected reply of %d elements", len(res))
	}
	flag, err := res[0].AsInt64()
	if err != nil {
		return false, 0, nil, 0, 0, fmt.Errorf("redisync: group acquire: %w", err)
	}
	if flag != 1 {
		pttl, err1 := res[1].AsInt64()
		i, err2 := res[2].AsInt64()
		if err := errors.Join(err1, err2); err != nil {
			return false, 0, nil, 0, 0, fmt.Errorf("redisync: group acquire: %w", err)
		}
		if i < 1 || int(i) > n {
			return false, 0, nil, 0, 0, fmt.Errorf("redisync: group acquire: blocked by lock %d of %d", i, n)
		}
		return false, 0, nil, int(i) - 1, time.Duration(pttl)*time.Millisecond + time.Millisecond, nil
	}
	if len(res) != n+2 {
		return false, 0, nil, 0, 0, fmt.Errorf("redisync: group acquire: %d tokens for %d locks", len(res)-2, n)
	}
	parse := func(m rueidis.RedisMessage) (uint64, error) {
		s, err := m.ToString()
		if err != nil {
			return 0, err
		}
		return strconv.ParseUint(s, 10, 64)
	}
	if token, err = parse(res[1]); err != nil {
		return false, 0, nil, 0, 0, fmt.Errorf("redisync: group acquire: %w", err)
	}
	tokens = make([]uint64, n)
	for i := range tokens {
		if tokens[i], err = parse(res[i+2]); err != nil {
			return false, 0, nil, 0, 0, fmt.Errorf("redisync: group acquire: %w", err)
		}
	}
	return true, token, tokens, 0, 0, nil
}

// acquireOrdered takes the locks one at a time, in the group's order, each
// with the acquisition of its Mutex.
func (g *Group) acquireOrdered(ctx context.Context, try bool) (*Lease, error) {
	actx, stop := watchClosed(ctx, g.clients)
	defer stop()
	backoff := 10 * time.Millisecond
	for {
		ms := make([]*member, 0, len(g.ms))
		var err error
		for _, m := range g.ms {
			var l *Lease
			if l, err = m.acquire(actx, try); err != nil {
				if errors.Is(err, ErrLocked) {
					err = fmt.Errorf("%w: %q", err, m.name)
				}
				break
			}
			ms = append(ms, &member{c: m.c, m: m, owner: l.h.owner, hold: l.hold, ttl: l.h.lease, lease: l, token: l.h.token, state: memberHeld, counted: true})
		}
		var token uint64
		if err == nil {
			var raised []bool
			token, raised, err = raiseFences(actx, ms, 0)
			for i, ok := range raised {
				if !ok && err == nil {
					err = fmt.Errorf("%w: lock %q of the group was lost while the group was taken", ErrExpired, ms[i].m.name)
				}
			}
		}
		if err == nil && actx.Err() == nil {
			return newGroupLease(ctx, groupPrimitive, g.clients[0], g.name, ms, len(ms), token, 0, time.Time{}), nil
		}
		dctx, cancel := detached(ctx)
		releaseMembers(dctx, ms, 0)
		cancel()
		logReleaseErr(g.clients[0], g.name, ms, "release of an abandoned group acquisition failed; it expires with its lease")
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
		if err := sleepAll(actx, g.clients, backoff); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, ErrClosed
		}
		backoff = min(2*backoff, time.Second)
	}
}
