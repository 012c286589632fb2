package redisync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
)

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
// fixed lease, WithFixedLease, or a renewed lease of its own,
// WithRenewedLease) and reported lost as a Mutex lease is. Lost
// closes when fewer than N/2+1 of them still hold it: Err is then
// ErrNoQuorum wrapping the servers' loss reasons, and the lock is released
// on every server at once. Unlock releases it on every server, the ones that
// never granted it included; it returns nil when a majority released it,
// and ErrNotHeld when fewer than a majority still held it or the lock was
// lost before (its loss released it everywhere). Each release has
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
// (WithFixedLease or WithRenewedLease, the only options). An empty name,
// no Client, a nil or
// repeated Client or an invalid or other option makes every method fail
// with ErrInvalidArgument.
func NewQuorum(name string, clients []*Client, opts ...LockOption) *Quorum {
	q := &Quorum{name: name}
	if len(clients) == 0 {
		q.err = fmt.Errorf("%w: a quorum needs at least one Client", ErrInvalidArgument)
		return q
	}
	if q.err = checkLockOptions("Quorum", optFixedLease|optRenewedLease, opts); q.err != nil {
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

// Lock acquires the lock on a majority of the servers, waiting as long as
// ctx allows. It returns, when ctx ends first, an error naming the lock
// that matches both ctx's error and ErrLocked (see ErrLocked), wrapping the
// last failed attempt (ErrNoQuorum); ErrClosed when one of the Clients is closed
// (closing any of them ends the acquisition); ErrNoQuorum at once when so
// many servers refused it with errors that retrying cannot cure (a key of
// the wrong type) that no majority is left. Whenever it returns an error
// nothing is held.
func (q *Quorum) Lock(ctx context.Context) (*Lease, error) { return lockHandle(ctx, q, false) }

// TryLock makes one attempt on every server. It returns ErrNoQuorum when
// fewer than a majority granted the lock (wrapping ErrLocked when others
// held it there); nothing is held then.
func (q *Quorum) TryLock(ctx context.Context) (*Lease, error) { return lockHandle(ctx, q, true) }

// Acquire acquires the lock in the background and delivers one Lease on
// the returned channel, then closes it, as Mutex.Acquire does. To give up,
// cancel ctx.
func (q *Quorum) Acquire(ctx context.Context) <-chan *Lease { return acquireHandle(ctx, q) }

// quorumPrimitive is the primitive name of quorums in Metrics. Their
// members count as "mutex" locks as well.
const quorumPrimitive = "quorum"

func (q *Quorum) acquire(ctx context.Context, try bool) (l *Lease, err error) {
	since := time.Now()
	if !try {
		defer func() { err = waitEnded(ctx, err, quorumPrimitive, q.name, "", ErrLocked) }()
	}
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
	pause := errorBackoff()
	var lastErr error
	for {
		for _, c := range q.clients {
			if c.isClosed() {
				return nil, ErrClosed
			}
		}
		w.mark()
		l, out := q.attempt(ctx, since)
		if l != nil {
			return l, nil
		}
		if out.err != nil {
			lastErr = out.err
		}
		switch {
		case ctx.Err() != nil:
			return nil, ctxErr(ctx, lastErr)
		case try || out.hopeless:
			return nil, out.err
		}
		for _, i := range out.busy {
			if err := w.join(ctx, q.clients[i], q.ms[i].keys.channel, ownPubSub, q.ms[i].keys.ownerProbe); err != nil {
				return nil, err
			}
		}
		if err := q.pause(ctx, &w, out, &pause); err != nil {
			if ctx.Err() != nil {
				return nil, ctxErr(ctx, lastErr)
			}
			return nil, err
		}
	}
}

// pause waits after a failed attempt: where others held the lock, for its
// release on the servers that reported it (after a random delay when
// contenders split the servers); otherwise with backoff.
func (q *Quorum) pause(ctx context.Context, w *waitSet, out roundOutcome, b *backoff) error {
	if len(out.busy) == 0 {
		d := b.next()
		return sleepAll(ctx, q.clients, d+rand.N(d))
	}
	if out.granted > 0 {
		// Contenders split the servers: spread their next attempts
		// apart, the one that came closest first.
		short := q.need - out.granted
		if err := sleepAll(ctx, q.clients, time.Duration(short)*(out.elapsed+rand.N(out.elapsed+2*time.Millisecond))); err != nil {
			return err
		}
	}
	timedOut, err := w.wait(ctx, q.clients, out.wait)
	if timedOut {
		for _, i := range out.busy {
			if freeAfterTimer(ctx, q.clients[i], w, quorumPrimitive, q.name, q.ms[i].keys.lock) {
				break
			}
		}
	}
	return err
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
	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, q.timeout)
	defer cancel()
	r, pending := q.startRound(ctx, sctx)
	results := r.collect(sctx, q.need, pending, start)
	out, failures := q.tally(r, results)
	if out.granted >= q.need && ctx.Err() == nil {
		if l := q.confirm(ctx, r, results, &out, start, since); l != nil {
			return l, out
		}
	}
	out.elapsed = time.Since(start)
	if out.err == nil {
		out.err = q.roundErr(out.granted, failures)
	}
	q.clients[0].cleanup(ctx, func(ctx context.Context) { releaseMembers(ctx, r.members, q.timeout) })
	return nil, out
}

// startRound sends the acquire script to every server at once, each bounded
// by sctx, and returns the round that collects their answers with the
// number of answers on their way.
func (q *Quorum) startRound(ctx, sctx context.Context) (r *quorumRound, pending int) {
	n := len(q.ms)
	r = &quorumRound{members: make([]*member, n), answers: make(chan int, n), results: make([]quorumResult, n)}
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
	return r, pending
}

// collect waits for every server's answer, at most until sctx ends, and
// returns the answers it got. Once need of them granted the lock, it waits
// for the others only as long again as that took: they are released when
// they answer. Once no majority can be reached, the answers still on their
// way are only waited for to release what they took before returning, as
// Mutex.Lock does.
func (r *quorumRound) collect(sctx context.Context, need, pending int, start time.Time) []quorumResult {
	n := len(r.members)
	granted, refused := 0, n-pending
	var rest <-chan time.Time
wait:
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
			if granted == need && pending > 0 && refused <= n-need {
				t := time.NewTimer(time.Since(start) + time.Millisecond)
				defer t.Stop()
				rest = t.C
			}
		case <-rest:
			break wait
		case <-sctx.Done():
			break wait
		}
	}
	r.mu.Lock()
	r.closed = true
	results := slices.Clone(r.results)
	r.mu.Unlock()
	return results
}

// tally records each server's answer in its member, and returns how many
// granted the lock, where others held it, and each server's failure.
func (q *Quorum) tally(r *quorumRound, results []quorumResult) (out roundOutcome, failures []error) {
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
	out.hopeless = incurable > len(q.ms)-q.need
	return out, failures
}

// confirm raises the fencing counter of the servers that granted the lock
// to the greatest of their tokens, and returns the Lease when a majority
// confirmed it with validity left. Otherwise it returns nil, and out.err
// says why (nil when ctx ended).
func (q *Quorum) confirm(ctx context.Context, r *quorumRound, results []quorumResult, out *roundOutcome, start, since time.Time) *Lease {
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
		return nil
	case confirmed < q.need:
		if err == nil {
			err = errors.New("the lock was lost meanwhile")
		}
		out.err = errorf("%w: the fencing counter of %q was raised on %d of %d servers, %d needed: %w", ErrNoQuorum, q.name, confirmed, len(q.ms), q.need, err)
		return nil
	case q.lease-out.elapsed-drift <= q.lease/10:
		out.err = errorf("%w: acquiring %q took %v, leaving no validity of its %v lease", ErrNoQuorum, q.name, out.elapsed.Round(time.Microsecond), q.lease)
		return nil
	}
	for i, res := range results {
		if !res.done {
			// Released by Unlock too, should its late answer be lost.
			r.members[i].state = memberNone
		}
	}
	return newGroupLease(ctx, quorumPrimitive, q.clients[0], q.name, r.members, q.need, token, q.timeout, since)
}

// roundErr is the error of an attempt that fewer than a majority granted.
func (q *Quorum) roundErr(granted int, failures []error) error {
	if len(failures) == 0 {
		return errorf("%w: %q: the context ended", ErrNoQuorum, q.name)
	}
	return errorf("%w: %d of %d servers granted %q, %d needed: %w", ErrNoQuorum, granted, len(q.ms), q.name, q.need, joinedErrs(failures))
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
	args := acquireArgs(mb.owner, mb.hold, mb.ttl, "", 0, "", 0, mb.parent)
	sent := time.Now()
	res, err := m.queued().attempt(ctx, args)
	if err != nil {
		return quorumResult{err: err}
	}
	ok, val, err := parseAcquire(res)
	if err != nil {
		return quorumResult{err: refusedReentry(mb.parent, err)}
	}
	if !ok {
		return quorumResult{busy: true, wait: time.Duration(val)*time.Millisecond + time.Millisecond}
	}
	l, err := c.grant(ctx, grant{kind: mutexKind, name: m.name, keys: m.keys, key: m.keys.lock, parent: mb.parent, owner: mb.owner, hold: mb.hold,
		token: val, lease: mb.ttl, watchdog: m.cfg.fixedLease == 0, sent: sent})
	if err != nil {
		m.queued().releaseAbandoned(ctx, mb.owner, mb.hold)
		return quorumResult{err: err}
	}
	return quorumResult{lease: l, token: l.ownToken()} // a re-entry of a lease passed on locally: its own
}
