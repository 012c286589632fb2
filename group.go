package redisync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync/internal/sema"
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
			g.err = errorf("lock %d of the group: %w", i, err)
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

// Primitive names of groups in Metrics. Their members count as "mutex"
// locks as well.
const (
	groupPrimitive  = "group"
	quorumPrimitive = "quorum"
)

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
			return nil, errorf("lock %q of the group: %w", mb.m.name, err)
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

// watchClosed returns a context that also ends, with ErrClosed as its
// cause, when any of clients is closed. stop releases it. With one Client
// there is nothing to watch: its own waits watch it.
func watchClosed(ctx context.Context, clients []*Client) (context.Context, func()) {
	if len(clients) < 2 {
		return ctx, func() {}
	}
	actx, cancel := context.WithCancelCause(ctx)
	cases := []reflect.SelectCase{recvCase(actx.Done())}
	for _, c := range clients {
		cases = append(cases, recvCase(c.closed))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if i, _, _ := reflect.Select(cases); i > 0 {
			cancel(ErrClosed)
		}
	}()
	return actx, func() {
		cancel(nil)
		<-done
	}
}

// acquireMulti is Client.acquireAsync for an acquisition that spans
// clients: the goroutine counts as one of each Client's, so that Close of
// any of them waits for it (the acquisition ends when any of them closes).
func acquireMulti(ctx context.Context, clients []*Client, acquire func(context.Context) (*Lease, error)) <-chan *Lease {
	for _, c := range clients[1:] {
		c.waiters.Add(1)
	}
	return clients[0].acquireAsync(ctx, nil, func(ctx context.Context) (*Lease, error) {
		defer func() {
			for _, c := range clients[1:] {
				c.waiters.Done()
			}
		}()
		return acquire(ctx)
	})
}

// Quorum is a lock over N independent Redis servers that is held while a
// majority of them (N/2+1) hold it, as in the Redlock algorithm: it stays
// available, and held, while a minority of the servers is down, slow or cut
// off, where a lock on one deployment would not. A Quorum is a cheap handle,
// safe for concurrent use.
//
// Each Client must reach its own server (a standalone primary, or a
// deployment of its own): servers that replicate to one another, or two
// Clients of one server, defeat the majority. On each server the lock is a
// Mutex lock of the Quorum's name, and interoperates with Mutexes of that
// name there.
//
// How it is taken: one attempt tries every server at once, each with one
// script and a timeout of its own (a twentieth of the lease, between 50ms and
// 1s). It waits for every answer, but once a majority granted the lock only
// as long again as that took, so a hung server slows a successful attempt
// down by little (a failed one waits for the answers on their way, at most
// the timeout, to release what they took). The attempt succeeds when
// at least N/2+1 servers granted the lock, the fencing counter was raised
// (see Token below) on a majority of them, and validity is left: lease −
// elapsed − drift, with the clock drift allowance of Redlock (lease/100 +
// 2ms), must exceed the tenth of the lease that the watchdog keeps as a
// safety margin, where lease is the smallest lease of the servers.
// Otherwise the attempt failed, and the lock is released on every server it
// was tried on, the ones that failed or did not answer in time included (a
// server that answers late releases what it granted as soon as it answers;
// a server that hangs may run an acquisition after the release sent to it,
// and that lock expires with its lease).
//
// Lock repeats attempts until it succeeds or ctx ends: while the lock is
// held elsewhere it waits for its release (announced on the servers that
// reported it held, or at most the holder's remaining lease), and it retries
// failures with backoff. Contenders that split the servers between them
// (each holding some, none a majority) release them and retry after random
// delays, the one that held most first; within one process, acquisitions of
// one lock (the same name over the same Clients) take turns instead, so
// they never split it. TryLock makes one attempt, without waiting for its
// turn. A failed attempt is ErrNoQuorum, wrapping each server's error
// (ErrLocked where another owner held the lock).
//
// The Lease has the contract of a Mutex lease. On each server that granted
// it the lock is a Mutex lease, renewed by the watchdog of its Client (or a
// fixed lease, WithFixedLease) and reported lost as a Mutex lease is. Lost
// closes when fewer than N/2+1 of them still hold it: Err is then
// ErrNoQuorum wrapping the servers' loss reasons, and the lock is released
// on every server at once. Unlock releases it on every server, the ones that
// never granted it included; it returns nil when a majority released it,
// and ErrNotHeld when fewer than a majority still held it. Each release has
// the per-server timeout, so that a hung server delays Unlock by that much
// only. Token is T, the greatest of the servers' tokens: before the Lease is
// returned the fencing counter of the name is raised to T on a majority of
// the servers while they hold the lock, so that T is strictly greater than
// the token of every earlier ownership of the Quorum (even one that expired
// while its holder was paused), whatever the servers' clocks say, as long as
// no server lost its data.
//
// What it protects against, and what not:
//
//   - Down, slow or partitioned servers: while a majority answers, the lock
//     is acquired, kept and released; with half of them or more gone,
//     acquisitions fail with ErrNoQuorum and a held lease reports loss
//     before the members it still counts on could expire.
//   - Failover with asynchronous replication: a server that fails over to a
//     replica that had not received the lock forgets it. That is the loss of
//     one server, tolerated while it stays a minority; do not give a Quorum
//     replicated deployments expecting more.
//   - Restarts: a server restarted without persistence (or with AOF not
//     synced at every write) forgets its locks. If it rejoins while a lease
//     is held, another client can assemble a majority that includes it: two
//     holders. Keep a crashed server down for longer than the lease before
//     it rejoins (Redlock's delayed restart), or run it with appendfsync
//     always. Such a loss also breaks the ordering of tokens.
//   - Clocks: leases expire on each server's clock and losses are detected
//     on the client's monotonic clock, so wall-clock steps on the client do
//     not matter. The drift allowance covers servers whose clocks run at
//     slightly different rates, not clocks that jump: a server whose clock
//     jumps forward expires the lock early, as if it had failed, and a
//     majority jumping at once frees the lock under its holder.
//   - Process pauses: a holder paused (GC, SIGSTOP, a VM migration) past its
//     validity resumes believing it holds the lock while another client
//     holds it; Lost tells it only afterwards. Redlock's safety rests on
//     such timing assumptions.
//
// So use the fencing token whenever correctness, not just efficiency, rests
// on mutual exclusion: have the protected resource reject writes that carry
// a token older than the newest it has seen. With tokens checked, one
// deployment with WithReplicaAck is as safe, and simpler; use a Quorum for
// availability through the loss of servers.
type Quorum struct {
	name    string
	ms      []*Mutex // one per Client, in the order given
	clients []*Client
	need    int           // a majority
	lease   time.Duration // the smallest lease of the members
	timeout time.Duration // per server and command
	gate    string        // names the lock among the process's quorums
	err     error
}

// NewQuorum returns the Quorum lock name over clients, one Client per
// independent server; opts apply to the lock on every server
// (WithFixedLease, the only option). An empty name, no Client, a nil or
// repeated Client or an invalid or other option makes every method fail
// with ErrInvalidArgument.
func NewQuorum(name string, clients []*Client, opts ...LockOption) *Quorum {
	q := &Quorum{name: name}
	if len(clients) == 0 {
		q.err = fmt.Errorf("%w: a quorum needs at least one Client", ErrInvalidArgument)
		return q
	}
	if q.err = checkLockOptions("Quorum", optFixedLease, opts); q.err != nil {
		return q
	}
	for i, c := range clients {
		if c == nil {
			q.err = fmt.Errorf("%w: Client %d of the quorum is nil", ErrInvalidArgument, i)
			return q
		}
		if slices.Contains(clients[:i], c) {
			q.err = fmt.Errorf("%w: Client %d of the quorum appears twice", ErrInvalidArgument, i)
			return q
		}
		m := c.Mutex(name, opts...)
		if m.err != nil {
			q.err = m.err
			return q
		}
		lease := m.cfg.lease(c)
		if i == 0 || lease < q.lease {
			q.lease = lease
		}
		q.ms = append(q.ms, m)
	}
	q.clients = slices.Clone(clients)
	q.need = len(clients)/2 + 1
	q.timeout = min(max(q.lease/20, 50*time.Millisecond), time.Second)
	ids := make([]string, len(clients))
	for i, c := range clients {
		ids[i] = c.id
	}
	slices.Sort(ids)
	q.gate = name + "\x00" + strings.Join(ids, ",")
	return q
}

// quorumGates let one acquisition at a time of a process compete for a
// Quorum lock: contenders of one process then never split the servers
// between them, each failing for the other. The others wait in the process
// for their turn. Gates live while somebody uses them.
var quorumGates = struct {
	sync.Mutex
	m map[string]*quorumGate
}{m: make(map[string]*quorumGate)}

type quorumGate struct {
	turn chan struct{} // holds a value while an acquisition competes
	refs int           // guarded by quorumGates
}

// enterGate waits for the turn of this acquisition to compete for the lock
// among the process's acquisitions of it. Call the returned function when
// the acquisition ends.
func (q *Quorum) enterGate(ctx context.Context) (leave func(), err error) {
	quorumGates.Lock()
	g := quorumGates.m[q.gate]
	if g == nil {
		g = &quorumGate{turn: make(chan struct{}, 1)}
		quorumGates.m[q.gate] = g
	}
	g.refs++
	quorumGates.Unlock()
	out := func() {
		quorumGates.Lock()
		if g.refs--; g.refs == 0 {
			delete(quorumGates.m, q.gate)
		}
		quorumGates.Unlock()
	}
	select {
	case g.turn <- struct{}{}:
		return func() { <-g.turn; out() }, nil
	default:
	}
	cases := []reflect.SelectCase{{Dir: reflect.SelectSend, Chan: reflect.ValueOf(g.turn), Send: reflect.ValueOf(struct{}{})}, recvCase(ctx.Done())}
	for _, c := range q.clients {
		cases = append(cases, recvCase(c.closed))
	}
	switch i, _, _ := reflect.Select(cases); i {
	case 0:
		return func() { <-g.turn; out() }, nil
	case 1:
		out()
		return nil, ctx.Err()
	}
	out()
	return nil, ErrClosed
}

// Name returns the lock's name.
func (q *Quorum) Name() string {
	if q == nil {
		return ""
	}
	return q.name
}

func (q *Quorum) check(ctx context.Context) error {
	switch {
	case q == nil:
		return fmt.Errorf("%w: nil Quorum", ErrInvalidArgument)
	case q.err != nil:
		return q.err
	case len(q.ms) == 0:
		return fmt.Errorf("%w: Quorum not made by NewQuorum", ErrInvalidArgument)
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	for _, c := range q.clients {
		if c.isClosed() {
			return ErrClosed
		}
	}
	return nil
}

// Lock acquires the lock on a majority of the servers, waiting as long as
// ctx allows. It returns ctx's error when ctx ends first, wrapping the last
// failed attempt (ErrNoQuorum); ErrClosed when one of the Clients is closed
// (closing any of them ends the acquisition); ErrNoQuorum at once when so
// many servers refused it with errors that retrying cannot cure (a key of
// the wrong type) that no majority is left. Whenever it returns an error
// nothing is held.
func (q *Quorum) Lock(ctx context.Context) (*Lease, error) {
	if err := q.check(ctx); err != nil {
		return nil, err
	}
	return q.acquire(ctx, false)
}

// TryLock makes one attempt on every server. It returns ErrNoQuorum when
// fewer than a majority granted the lock (wrapping ErrLocked when others
// held it there); nothing is held then.
func (q *Quorum) TryLock(ctx context.Context) (*Lease, error) {
	if err := q.check(ctx); err != nil {
		return nil, err
	}
	return q.acquire(ctx, true)
}

// Acquire acquires the lock in the background and delivers one Lease on
// the returned channel, then closes it, as Mutex.Acquire does. To give up,
// cancel ctx.
func (q *Quorum) Acquire(ctx context.Context) <-chan *Lease {
	if err := q.check(ctx); err != nil {
		return (*Client)(nil).acquireAsync(ctx, err, nil)
	}
	return acquireMulti(ctx, q.clients, func(ctx context.Context) (*Lease, error) { return q.acquire(ctx, false) })
}

func (q *Quorum) acquire(ctx context.Context, try bool) (l *Lease, err error) {
	since := time.Now()
	if f := q.clients[0].cfg.metrics.Acquired; f != nil {
		defer func() {
			if l != nil {
				f(quorumPrimitive, q.name, time.Since(since))
			}
		}()
	}
	if !try {
		// A single attempt does not wait for the process's other
		// acquisitions.
		leave, err := q.enterGate(ctx)
		if err != nil {
			return nil, err
		}
		defer leave()
	}
	var w waitSet
	defer w.leave()
	backoff := 10 * time.Millisecond
	var lastErr error
	for {
		for _, c := range q.clients {
			if c.isClosed() {
				return nil, ErrClosed
			}
		}
		l, out := q.attempt(ctx, since)
		if l != nil {
			return l, nil
		}
		// A wake-up is not passed on: a failed attempt releases the servers
		// it took, which announces their release again.
		w.woken = nil
		if out.err != nil {
			lastErr = out.err
		}
		switch {
		case ctx.Err() != nil:
			return nil, ctxErr(ctx, lastErr)
		case try || out.hopeless:
			return nil, out.err
		}
		var err error
		if len(out.busy) > 0 {
			for _, i := range out.busy {
				if err = w.join(q.clients[i], q.ms[i].keys.channel); err != nil {
					return nil, err
				}
			}
			if out.granted > 0 {
				// Contenders split the servers: spread their next attempts
				// apart, the one that came closest first.
				short := q.need - out.granted
				err = sleepAll(ctx, q.clients, time.Duration(short)*(out.elapsed+rand.N(out.elapsed+2*time.Millisecond)))
			}
			if err == nil {
				err = w.wait(ctx, q.clients, out.wait)
			}
		} else {
			err = sleepAll(ctx, q.clients, backoff+rand.N(backoff))
			backoff = min(2*backoff, time.Second)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctxErr(ctx, lastErr)
			}
			return nil, err
		}
	}
}

// quorumResult is what one server answered to an attempt.
type quorumResult struct {
	lease *Lease
	token uint64
	busy  bool          // another owner holds the lock there
	wait  time.Duration // its remaining lease, when busy
	err   error
	done  bool // answered before the attempt stopped waiting
}

// quorumRound collects the answers of one attempt.
type quorumRound struct {
	members []*member
	answers chan int // the index of each server that answered

	mu      sync.Mutex
	closed  bool // the attempt stopped waiting: late answers undo themselves
	results []quorumResult
}

// roundOutcome is how a failed attempt failed.
type roundOutcome struct {
	err      error
	granted  int
	busy     []int         // servers where another owner held the lock
	wait     time.Duration // the least remaining lease among them
	hopeless bool          // too many servers refused with errors retrying cannot cure
	elapsed  time.Duration
}

// attempt tries every server once. It returns the Lease, or how it failed;
// on failure nothing it took is held.
// since is when the acquisition began.
func (q *Quorum) attempt(ctx context.Context, since time.Time) (*Lease, roundOutcome) {
	n := len(q.ms)
	start := time.Now()
	r := &quorumRound{members: make([]*member, n), answers: make(chan int, n), results: make([]quorumResult, n)}
	sctx, cancel := context.WithTimeout(ctx, q.timeout)
	defer cancel()
	pending := 0
	for i, m := range q.ms {
		mb := newMember(ctx, m)
		r.members[i] = mb
		if m.c.isClosed() {
			r.results[i] = quorumResult{err: ErrClosed, done: true}
			continue
		}
		pending++
		m.c.waiters.Add(1)
		go func() {
			defer m.c.waiters.Done()
			r.deliver(i, trySrv(sctx, mb))
		}()
	}
	// Wait for every server, at most the per-server timeout. Once a majority
	// granted the lock, wait for the others only as long again as that took:
	// they are released when they answer. Once no majority can be reached,
	// the answers still on their way are only waited for to release what
	// they took before returning, as Mutex.Lock does.
	granted, refused := 0, n-pending
	var rest <-chan time.Time
collect:
	for pending > 0 {
		select {
		case i := <-r.answers:
			pending--
			r.mu.Lock()
			res := r.results[i]
			r.mu.Unlock()
			if res.lease != nil && res.lease.Err() == nil {
				granted++
			} else {
				refused++
			}
			if granted == q.need && pending > 0 && refused <= n-q.need {
				t := time.NewTimer(time.Since(start) + time.Millisecond)
				defer t.Stop()
				rest = t.C
			}
		case <-rest:
			break collect
		case <-sctx.Done():
			break collect
		}
	}
	r.mu.Lock()
	r.closed = true
	results := slices.Clone(r.results)
	r.mu.Unlock()

	var out roundOutcome
	var failures []error
	incurable := 0
	for i, res := range results {
		mb := r.members[i]
		switch {
		case res.lease != nil:
			mb.lease, mb.token, mb.state = res.lease, res.token, memberHeld
			if err := res.lease.Err(); err != nil {
				failures = append(failures, fmt.Errorf("server %d: %w", i, err))
				continue
			}
			out.granted++
		case res.busy:
			mb.state = memberGone // certainly not taken
			out.busy = append(out.busy, i)
			if len(out.busy) == 1 || res.wait < out.wait {
				out.wait = res.wait
			}
			failures = append(failures, fmt.Errorf("server %d: %w", i, ErrLocked))
		case res.done:
			failures = append(failures, fmt.Errorf("server %d: %w", i, res.err))
			if !transient(res.err) {
				incurable++
			}
		default:
			// Still on its way: what it takes is released when it answers.
			mb.state = memberGone
			failures = append(failures, fmt.Errorf("server %d: no answer within %v", i, q.timeout))
		}
	}
	out.hopeless = incurable > n-q.need
	if out.granted >= q.need && ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, q.timeout)
		token, raised, err := raiseFences(fctx, r.members, q.timeout)
		cancel()
		confirmed := 0
		for _, ok := range raised {
			if ok {
				confirmed++
			}
		}
		out.elapsed = time.Since(start)
		drift := q.lease/100 + 2*time.Millisecond
		switch {
		case ctx.Err() != nil:
		case confirmed < q.need:
			if err == nil {
				err = errors.New("the lock was lost meanwhile")
			}
			out.err = errorf("%w: the fencing counter of %q was raised on %d of %d servers, %d needed: %w", ErrNoQuorum, q.name, confirmed, n, q.need, err)
		case q.lease-out.elapsed-drift <= q.lease/10:
			out.err = errorf("%w: acquiring %q took %v, leaving no validity of its %v lease", ErrNoQuorum, q.name, out.elapsed.Round(time.Microsecond), q.lease)
		default:
			for i, res := range results {
				if !res.done {
					// Released by Unlock too, should its late answer be lost.
					r.members[i].state = memberNone
				}
			}
			return newGroupLease(ctx, quorumPrimitive, q.clients[0], q.name, r.members, q.need, token, q.timeout, since), out
		}
	}
	out.elapsed = time.Since(start)
	switch {
	case out.err != nil:
	case len(failures) == 0:
		out.err = errorf("%w: %q: the context ended", ErrNoQuorum, q.name)
	default:
		out.err = errorf("%w: %d of %d servers granted %q, %d needed: %w", ErrNoQuorum, out.granted, n, q.name, q.need, joinedErrs(failures))
	}
	dctx, cancel := detached(ctx)
	releaseMembers(dctx, r.members, q.timeout)
	cancel()
	return nil, out
}

// deliver records a server's answer, or undoes it when the attempt stopped
// waiting for it.
func (r *quorumRound) deliver(i int, res quorumResult) {
	r.mu.Lock()
	if !r.closed {
		res.done = true
		r.results[i] = res
		r.mu.Unlock()
		r.answers <- i
		return
	}
	r.mu.Unlock()
	mb := r.members[i]
	switch {
	case res.lease != nil:
		res.lease.abandon(fmt.Errorf("%w: the quorum attempt ended before this server answered", ErrNotHeld))
	case res.err != nil && transient(res.err):
		ctx, cancel := detached(context.Background())
		defer cancel()
		if _, err := mb.c.release(ctx, mb.m.keys, mb.owner, mb.hold); err != nil {
			mb.c.log.Debug("redisync: release after a late quorum answer failed", "key", mb.m.keys.lock, "err", err)
		}
	}
}

// trySrv runs the acquire script of one server's lock once.
func trySrv(ctx context.Context, mb *member) quorumResult {
	m, c := mb.m, mb.c
	// The quorum waits for '1' messages on the servers that were busy.
	args := []string{mb.owner, mb.hold, strconv.FormatInt(mb.ttl.Milliseconds(), 10), strconv.FormatInt(c.cfg.fenceRetention.Milliseconds(), 10), "", "0", "", ""}
	sent := time.Now()
	res, err := m.queued().attempt(ctx, args)
	if err != nil {
		return quorumResult{err: err}
	}
	ok, val, err := parseAcquire(res)
	if err != nil {
		return quorumResult{err: err}
	}
	if !ok {
		return quorumResult{busy: true, wait: time.Duration(val)*time.Millisecond + time.Millisecond}
	}
	l, err := c.grant(ctx, mutexKind, m.name, m.keys, m.keys.lock, mb.parent, mb.owner, mb.hold, val, mb.ttl, m.cfg.fixedLease == 0, sent)
	if err != nil {
		m.queued().releaseAbandoned(ctx, mb.owner, mb.hold)
		return quorumResult{err: err}
	}
	return quorumResult{lease: l, token: uint64(val)}
}

// memberState is where a group member stands.
type memberState uint8

const (
	memberNone   memberState = iota // not known to be held (a server that did not grant): released by owner id
	memberHeld                      // held through its lease
	memberLost                      // its lease was lost, its lock may still be held: released by owner id
	memberUnsure                    // a release was sent while it was held, with no answer
	memberFreed                     // released
	memberGone                      // not held
)

// member is one lock of a group or one server of a quorum.
type member struct {
	c      *Client
	m      *Mutex
	parent *Lease // the lease this one re-enters, if any
	owner  string
	hold   string
	ttl    time.Duration
	lease  *Lease // the member's Mutex lease, once granted
	token  uint64
	state  memberState
	reason error       // why it was lost or found not held
	err    error       // the error of its last release
	stop   func() bool // stops the watch of its lease
	// counted: its acquisition was reported to Metrics, so its release is.
	counted bool
}

// newMember prepares an acquisition of m: a fresh owner, or the owner of
// the lease of m that ctx carries.
func newMember(ctx context.Context, m *Mutex) *member {
	c := m.c
	mb := &member{c: c, m: m, hold: c.newHold()}
	if p := leaseFrom(ctx, c, m.keys); p != nil {
		mb.parent, mb.owner, mb.ttl = p, p.h.owner, p.h.lease
		return mb
	}
	mb.owner, mb.ttl = c.newOwner(), m.cfg.lease(c)
	return mb
}

// groupState is one ownership of a Group or a Quorum: its members, and how
// many of them must hold.
type groupState struct {
	h       *holder
	name    string
	members []*member
	need    int
	quorum  bool
	timeout time.Duration // bounds each release command; 0: the caller's context only

	relMu sync.Mutex // one release at a time

	mu        sync.Mutex
	releasing bool // a release began: members ending are not losses
	lost      bool
	errored   bool // a release had no answer (guarded by relMu)
}

// newGroupLease makes the Lease of a group whose members are held (a
// quorum's members include the servers that did not grant it). need is how
// many members must hold for the group to hold; a quorum has a per-server
// timeout. The Lease reports to Metrics as primitive, and the members not
// reported yet as "mutex" locks acquired since start.
func newGroupLease(ctx context.Context, primitive string, c *Client, name string, ms []*member, need int, token uint64, timeout time.Duration, start time.Time) *Lease {
	gs := &groupState{name: name, members: ms, need: need, quorum: timeout > 0, timeout: timeout}
	// The holder's key names it in log lines and in the context; it has no
	// '{' or '}', which every lock key has, so it is never a lock's key.
	desc := "group " + strings.NewReplacer("{", `\x7b`, "}", `\x7d`).Replace(name)
	var ttl time.Duration
	vctx := ctx
	for _, m := range ms {
		if m.lease == nil {
			continue
		}
		if ttl == 0 || m.ttl < ttl {
			ttl = m.ttl
		}
		vctx = context.WithValue(vctx, ctxKey{m.c, m.m.keys.lock}, m.lease)
	}
	kind := &leaseKind{
		primitive:    primitive,
		unlock:       func(ctx context.Context, _ *holder, _ string) (releaseState, error) { return gs.release(ctx, "") },
		spansClients: true,
	}
	h := &holder{
		c: c, kind: kind, name: name, keys: lockKeys{lock: desc}, key: desc, token: token, lease: ttl,
		leases: make(map[*Lease]struct{}, 1), lastOK: time.Now(), lost: make(chan struct{}),
	}
	gs.h = h
	l := newLease(vctx, h, "")
	h.leases[l] = struct{}{}
	gs.mu.Lock()
	for _, m := range ms {
		if m.lease == nil || m.state != memberHeld {
			continue
		}
		m.stop = context.AfterFunc(m.lease.Context(), func() { gs.memberEnded(m) })
		if f := m.c.cfg.metrics.Acquired; f != nil && !m.counted {
			f(mutexKind.primitive, m.m.name, time.Since(start))
		}
		m.counted = true
	}
	gs.mu.Unlock()
	return l
}

// memberEnded runs when a member's lease ended. Unless the group is
// releasing it, the member was lost: when too few members are left, the
// group is lost, and what it still holds is released.
func (gs *groupState) memberEnded(m *member) {
	gs.mu.Lock()
	if gs.releasing || gs.lost || m.state != memberHeld {
		gs.mu.Unlock()
		return
	}
	m.state, m.reason = memberLost, context.Cause(m.lease.Context())
	held := 0
	for _, x := range gs.members {
		if x.state == memberHeld {
			held++
		}
	}
	if held >= gs.need {
		gs.mu.Unlock()
		gs.h.c.log.Warn("redisync: a server of the quorum lost the lock", "key", m.m.keys.lock, "reason", m.reason, "holding", held, "needed", gs.need)
		return
	}
	gs.lost = true
	reason := gs.lossReason(m, held)
	gs.mu.Unlock()
	gs.h.lose(reason)
	ctx, cancel := detached(context.Background())
	defer cancel()
	gs.release(ctx, "release after the loss of a group failed; the rest expires with its lease")
}

// lossReason is why the group is lost, m being the member whose loss ended
// it. Called with gs.mu held.
func (gs *groupState) lossReason(m *member, held int) error {
	if !gs.quorum {
		return errorf("lock %q of the group: %w", m.m.name, m.reason)
	}
	var reasons []error
	for i, x := range gs.members {
		if x.state == memberLost {
			reasons = append(reasons, fmt.Errorf("server %d: %w", i, x.reason))
		}
	}
	return errorf("%w: %d of %d servers hold %q, %d needed: %w", ErrNoQuorum, held, len(gs.members), gs.name, gs.need, joinedErrs(reasons))
}

// release releases every member that may still be held (the leaseKind
// unlock of a group holder). If logMsg is set, a failure is logged with it.
func (gs *groupState) release(ctx context.Context, logMsg string) (releaseState, error) {
	gs.relMu.Lock()
	defer gs.relMu.Unlock()
	gs.mu.Lock()
	gs.releasing = true
	for _, m := range gs.members {
		if m.stop != nil {
			m.stop()
		}
	}
	gs.mu.Unlock()
	releaseMembers(ctx, gs.members, gs.timeout)
	if logMsg != "" {
		logReleaseErr(gs.h.c, gs.name, gs.members, logMsg)
	}
	st, reason, err := gs.outcome()
	if err != nil {
		gs.errored = true
	} else if st == notHeld && !gs.errored {
		// Found lost: report it with its reason, as Lease.Unlock would with
		// ErrExpired. (After a release with no answer, Lease.Unlock decides.)
		gs.h.lose(reason)
	}
	return st, err
}

// outcome reads what the releases of the members found: freed when the
// group held until released, notHeld and the reason when not, an error
// when that is unknown. Called with relMu held.
func (gs *groupState) outcome() (st releaseState, reason, err error) {
	if gs.quorum {
		released, open := 0, 0
		var err error
		var reasons []error
		for i, m := range gs.members {
			if m.lease == nil {
				continue // never granted
			}
			switch m.state {
			case memberFreed:
				released++
			case memberUnsure:
				// Held when its release was sent: it may count.
				open++
				err = cmp.Or(err, m.err)
			default:
				reasons = append(reasons, fmt.Errorf("server %d: %w", i, cmp.Or(m.reason, ErrExpired)))
			}
		}
		switch {
		case released >= gs.need:
			return freed, nil, nil
		case released+open >= gs.need:
			return notHeld, nil, cmp.Or(err, errors.New("redisync: release: outcome unknown"))
		}
		return notHeld, errorf("%w: %d of %d servers held %q, %d needed: %w", ErrNoQuorum, released, len(gs.members), gs.name, gs.need, joinedErrs(reasons)), nil
	}
	for _, m := range gs.members {
		switch m.state {
		case memberFreed:
		case memberGone:
			if reason == nil {
				reason = errorf("lock %q of the group: %w", m.m.name, cmp.Or(m.reason, ErrExpired))
			}
		default:
			err = cmp.Or(err, m.err, errors.New("redisync: release: outcome unknown"))
		}
	}
	switch {
	case err != nil:
		return notHeld, nil, err
	case reason != nil:
		return notHeld, reason, nil
	}
	return freed, nil, nil
}

// logReleaseErr logs the first release error of members.
func logReleaseErr(c *Client, name string, ms []*member, msg string) {
	for _, m := range ms {
		if m.err != nil && m.state != memberNone {
			c.log.Error("redisync: "+msg, "group", name, "key", m.m.keys.lock, "err", m.err)
			return
		}
	}
}

// releaseMembers releases every member that may hold its lock, with one
// group release script per Client and slot, all sent at once, and records
// the outcome in each member. A member still held is released as
// Lease.Unlock would release its lease; the others by owner id. timeout, if
// not 0, bounds each script.
func releaseMembers(ctx context.Context, ms []*member, timeout time.Duration) {
	type bucketKey struct {
		c    *Client
		slot uint16
	}
	var order []bucketKey
	buckets := make(map[bucketKey][]*member)
	for _, m := range ms {
		if m.state == memberFreed || m.state == memberGone {
			continue
		}
		if m.c.isClosed() {
			// Close released what its watchdog held; nothing can be sent.
			m.state, m.reason = memberGone, ErrClosed
			continue
		}
		k := bucketKey{c: m.c}
		if m.c.cluster {
			k.slot = slotHash(m.m.keys.lock)
		}
		if buckets[k] == nil {
			order = append(order, k)
		}
		buckets[k] = append(buckets[k], m)
	}
	if len(order) == 1 {
		releaseBucket(ctx, order[0].c, buckets[order[0]], timeout)
		return
	}
	var wg sync.WaitGroup
	for _, k := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			releaseBucket(ctx, k.c, buckets[k], timeout)
		}()
	}
	wg.Wait()
}

// releaseBucket runs the group release script for members of one Client
// and slot.
func releaseBucket(ctx context.Context, c *Client, ms []*member, timeout time.Duration) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	keys := make([]string, 0, 4*len(ms))
	args := make([]string, 1, 1+3*len(ms))
	args[0] = strconv.FormatInt(c.cfg.fenceRetention.Milliseconds(), 10)
	for _, m := range ms {
		keys = append(keys, m.m.keys.lock, m.m.keys.fence, m.m.keys.queue, m.m.keys.waiters)
		args = append(args, m.owner, m.hold, m.m.keys.channel)
	}
	// Counted as in flight until the answers are applied: a renewal
	// answered in between never reads a released lock as lost.
	var releasing []*holder
	for _, m := range ms {
		if m.state == memberHeld {
			releasing = append(releasing, m.lease.h)
			m.lease.h.beginRelease()
		}
	}
	defer func() {
		for _, h := range releasing {
			h.endRelease()
		}
	}()
	res, err := groupReleaseScript.exec(ctx, c.rc, keys, args).AsIntSlice()
	if err == nil && len(res) != len(ms) {
		err = fmt.Errorf("%d answers for %d locks", len(res), len(ms))
	}
	if err != nil {
		err = redisErr("group release", err)
		for _, m := range ms {
			m.failed(err)
		}
		return
	}
	for i, m := range ms {
		m.settle(res[i])
	}
}

// settle applies a release answer (1 freed, 2 still held through other
// holds, 0 not held) to the member, with the bookkeeping of Lease.Unlock
// for a member still held.
func (m *member) settle(answer int64) {
	m.err = nil
	switch m.state {
	case memberHeld:
		l, h := m.lease, m.lease.h
		if answer == 0 {
			h.lose(ErrExpired)
			h.mu.Lock()
			reason := h.err
			h.mu.Unlock()
			l.fail(reason)
			m.state, m.reason = memberGone, reason
			return
		}
		l.end(ErrReleased)
		if answer == 1 {
			h.finish()
		}
		m.state = memberFreed
		if f := m.c.cfg.metrics.Released; f != nil && m.counted {
			f(mutexKind.primitive, m.m.name, time.Since(l.since))
		}
	case memberUnsure:
		// The earlier release, sent while the lock was held, freed it if
		// this one finds it gone.
		m.state = memberFreed
	default:
		if answer == 0 {
			m.state = memberGone
		} else {
			m.state = memberFreed
		}
	}
}

// failed records a release with no answer. A member still held stops being
// renewed: the release freed it, or it expires with its lease, or a later
// release frees it by owner id.
func (m *member) failed(err error) {
	m.err = err
	if m.state != memberHeld {
		return
	}
	l, h := m.lease, m.lease.h
	l.end(ErrReleased)
	h.mu.Lock()
	rest := len(h.leases) // leases that re-entered it keep it
	if rest == 0 {
		h.done = true
	}
	h.mu.Unlock()
	if rest == 0 {
		h.c.watchdog.remove(h)
	}
	m.state = memberUnsure
}

// raiseFences makes T, the greatest token of the held members, the floor
// of every later token of their locks: the fencing counter of every member
// with a lower token is raised to T while its owner holds it, with one
// script per Client and slot, all sent at once. It returns T and, per
// member, whether its counter is at T (false for members not held). timeout,
// if not 0, bounds each script; errors of single scripts are returned only
// with their members false.
func raiseFences(ctx context.Context, ms []*member, timeout time.Duration) (uint64, []bool, error) {
	var token uint64
	for _, m := range ms {
		if m.state == memberHeld && m.lease.Err() == nil {
			token = max(token, m.token)
		}
	}
	raised := make([]bool, len(ms))
	type bucketKey struct {
		c    *Client
		slot uint16
	}
	var order []bucketKey
	buckets := make(map[bucketKey][]int)
	for i, m := range ms {
		if m.state != memberHeld || m.lease.Err() != nil {
			continue
		}
		if m.token == token {
			raised[i] = true
			continue
		}
		k := bucketKey{c: m.c}
		if m.c.cluster {
			k.slot = slotHash(m.m.keys.lock)
		}
		if buckets[k] == nil {
			order = append(order, k)
		}
		buckets[k] = append(buckets[k], i)
	}
	if len(order) == 0 {
		return token, raised, nil
	}
	T := strconv.FormatUint(token, 10)
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for b, k := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := ctx
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			idx := buckets[k]
			keys := make([]string, 0, 2*len(idx))
			args := []string{T, strconv.FormatInt(k.c.cfg.fenceRetention.Milliseconds(), 10)}
			for _, i := range idx {
				keys = append(keys, ms[i].m.keys.lock, ms[i].m.keys.fence)
				args = append(args, ms[i].owner)
			}
			res, err := groupFenceScript.exec(ctx, k.c.rc, keys, args).AsIntSlice()
			if err == nil && len(res) != len(idx) {
				err = fmt.Errorf("%d answers for %d locks", len(res), len(idx))
			}
			if err != nil {
				errs[b] = redisErr("raise fence", err)
				return
			}
			for j, i := range idx {
				raised[i] = res[j] == 1
			}
		}()
	}
	wg.Wait()
	return token, raised, errors.Join(errs...)
}

// waitSet is what an acquisition that waits on several locks waits on: one
// subscription per lock channel (of one Client) that blocked it, joined the
// first time it did.
type waitSet struct {
	subs  []*subscription
	fresh []*subscription // joined since the last wait: not known to be in effect
	woken *subscription   // the one whose wake-up ended the last wait
}

// join subscribes to channel on c, unless the set already has it.
func (w *waitSet) join(c *Client, channel string) error {
	for _, s := range w.subs {
		if s.n.c == c && s.channel == channel {
			return nil
		}
	}
	s, err := c.notify.join(channel)
	if err != nil {
		return err
	}
	w.subs = append(w.subs, s)
	w.fresh = append(w.fresh, s)
	return nil
}

// wait blocks until a release wakes one of the subscriptions, for at most
// d. If subscriptions were joined since the last wait, it waits instead
// until they are in effect: a release published before was missed, so the
// caller looks again then. It returns ctx's error when ctx ends, ErrClosed
// when one of clients is closed.
func (w *waitSet) wait(ctx context.Context, clients []*Client, d time.Duration) error {
	w.woken = nil
	timer := time.NewTimer(max(d, time.Millisecond))
	defer timer.Stop()
	base := []reflect.SelectCase{recvCase(ctx.Done()), recvCase(timer.C)}
	for _, c := range clients {
		base = append(base, recvCase(c.closed))
	}
	if fresh := w.fresh; len(fresh) > 0 {
		w.fresh = nil
		for _, s := range fresh {
			i, _, _ := reflect.Select(append(slices.Clip(base), recvCase(s.ready)))
			if i < len(base) {
				return waitErr(ctx, i)
			}
		}
		return nil
	}
	tickets := make([]*sema.Ticket, len(w.subs))
	cases := slices.Clip(base)
	for i, s := range w.subs {
		tickets[i] = s.sema.Wait()
		cases = append(cases, recvCase(tickets[i].C))
	}
	i, _, _ := reflect.Select(cases)
	for _, t := range tickets {
		t.Cancel() // passes on a wake-up received but not consumed
	}
	if i >= len(base) {
		w.woken = w.subs[i-len(base)]
		return nil
	}
	return waitErr(ctx, i)
}

// waitErr maps the index of a base case of wait: 0 ctx, 1 the timer, then
// the Clients' closed channels.
func waitErr(ctx context.Context, i int) error {
	switch i {
	case 0:
		return ctx.Err()
	case 1:
		return nil
	}
	return ErrClosed
}

// passOn hands the wake-up that ended the last wait on to another waiter of
// its channel: the caller did not take that lock, and whoever else waits for
// it must not sleep through its release. The caller leaves the channel
// first, so that the wake-up cannot come back to it, and joins it again if
// the lock blocks it again. It keeps the wake-up when the lock it came from
// (on c, channel) blocked the caller again: its new holder will announce
// its release.
func (w *waitSet) passOn(c *Client, channel string) {
	s := w.woken
	w.woken = nil
	if s == nil || (s.n.c == c && s.channel == channel) {
		return
	}
	w.subs = slices.DeleteFunc(w.subs, func(x *subscription) bool { return x == s })
	s.leave()
	s.sema.Release(1)
}

// leave drops every subscription of the set.
func (w *waitSet) leave() {
	for _, s := range w.subs {
		s.leave()
	}
	w.subs, w.fresh, w.woken = nil, nil, nil
}

// sleepAll sleeps for d, or until ctx ends (its error) or one of clients
// is closed (ErrClosed).
func sleepAll(ctx context.Context, clients []*Client, d time.Duration) error {
	var w waitSet
	return w.wait(ctx, clients, d)
}

func recvCase(ch any) reflect.SelectCase {
	return reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)}
}

// joinedErrs is several errors on one line, all seen by errors.Is and
// errors.As.
type joinedErrs []error

func (e joinedErrs) Error() string {
	if len(e) == 0 {
		return "no error"
	}
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (e joinedErrs) Unwrap() []error { return e }
