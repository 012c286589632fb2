package redisync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A Group and a Quorum hold one Lease over several Mutex locks, their
// members: the locks of a Group, or the lock of a Quorum on each of its
// servers. Each member is taken with the scripts of a Mutex and held
// through a Mutex lease of its own, renewed by the watchdog of its Client
// and reported lost as a Mutex lease is. This file is what the two share on
// top of that.
//
// A member records where it stands (memberState): held through its lease,
// lost, released with no answer, freed, or known not to be held. A member
// not known to be held (a server of a quorum that did not grant, or
// answered too late) is still released by owner id, in case it took the
// lock after all; one that is freed or gone is not sent anything again.
//
// groupState is one ownership of a group: the holder behind its Lease,
// whose unlock is a release of every member. It watches the member leases:
// when fewer than need of them still hold (every member for a Group, a
// majority for a Quorum), the group is lost with the reason of the member
// that ended it, and what it still holds is released at once.
//
// Scripts are sent by bucket: the members one script can reach, of one
// Client and, on a Cluster, one slot. Releases run one group release script
// per bucket, all buckets at once. Fences are raised the same way: the
// group's token T is the greatest of its members' tokens, and the fencing
// counter of every other member is raised to T while its owner holds it, so
// that T is ordered with every ownership of each of the names.
//
// How a group waits is in waitset.go.

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

// heldMember is a member for the lease l of its Mutex, taken as a Mutex
// acquisition reports it. Its token is the lease's own: a re-entry of a
// lease passed on locally has the token of that pass, above the holder's,
// which an earlier goroutine of the Client held the lock with.
func heldMember(m *Mutex, l *Lease) *member {
	return &member{c: m.c, m: m, owner: l.h.owner, hold: l.hold, ttl: l.h.lease, lease: l, token: l.ownToken(), state: memberHeld, counted: true}
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

	// rel holds one token while a release runs: one release at a time. An
	// Unlock waits for the one running (the release after a loss) only as
	// long as its context and the grace of its call allow.
	rel chan struct{}

	mu        sync.Mutex
	releasing bool // a release began: members ending are not losses
	lost      bool
	errored   bool // a release had no answer (guarded by rel)
}

// newGroupLease makes the Lease of a group whose members are held (a
// quorum's members include the servers that did not grant it). need is how
// many members must hold for the group to hold; a quorum has a per-server
// timeout. The Lease reports to Metrics as primitive, and the members not
// reported yet as "mutex" locks acquired since start.
func newGroupLease(ctx context.Context, primitive string, c *Client, name string, ms []*member, need int, token uint64, timeout time.Duration, start time.Time) *Lease {
	gs := &groupState{name: name, members: ms, need: need, quorum: timeout > 0, timeout: timeout, rel: make(chan struct{}, 1)}
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
		deadline:     gs.deadline,
	}
	gs.h = &holder{
		c: c, kind: kind, name: name, keys: lockKeys{lock: desc}, key: desc, token: token, lease: ttl,
		leases: make(map[*Lease]struct{}, 1), lastOK: time.Now(), lost: make(chan struct{}),
	}
	l := newLease(vctx, gs.h, "")
	gs.h.leases[l] = struct{}{}
	gs.watch(start)
	return l
}

// deadline is when the group will be reported lost unless the watchdogs of
// its members renew them first: when fewer than need of the members held
// now would be left.
func (gs *groupState) deadline() time.Time {
	gs.mu.Lock()
	if gs.releasing {
		// The members' states are the release's now (it writes them
		// without gs.mu), and the group no longer vouches for them.
		gs.mu.Unlock()
		return time.Now()
	}
	var leases []*Lease
	for _, m := range gs.members {
		if m.lease != nil && m.state == memberHeld {
			leases = append(leases, m.lease)
		}
	}
	need := gs.need
	gs.mu.Unlock()
	var ds []time.Time
	for _, l := range leases {
		if d, ok := l.Deadline(); ok {
			ds = append(ds, d)
		}
	}
	if len(ds) < need || need < 1 {
		return time.Now()
	}
	slices.SortFunc(ds, time.Time.Compare)
	return ds[len(ds)-need]
}

// watch makes the end of every held member's lease call memberEnded, and
// reports the members not reported yet to Metrics as acquired since start.
func (gs *groupState) watch(start time.Time) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	for _, m := range gs.members {
		if m.lease == nil || m.state != memberHeld {
			continue
		}
		m.stop = context.AfterFunc(m.lease.Context(), func() { gs.memberEnded(m) })
		if f := m.c.cfg.metrics.Acquired; f != nil && !m.counted {
			f(mutexKind.primitive, m.m.name, time.Since(start))
		}
		m.counted = true
	}
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
	select {
	case gs.rel <- struct{}{}:
	default:
		// Another release runs: the one after the group's loss, which may
		// wait for Redis up to its own bound, or a concurrent Unlock. Its
		// outcome is this one's, unknown until it returns: past ctx and
		// its grace, the caller gets ctx's error, as from a release with
		// no answer, and may call Unlock again.
		over, stop := graceOver(ctx)
		defer stop()
		select {
		case gs.rel <- struct{}{}:
		case <-over:
			return notHeld, ctx.Err()
		}
		if err := ctx.Err(); err != nil {
			// Its turn came in the grace: a release sent now would leave
			// nothing, and fail every member as unanswered.
			<-gs.rel
			return notHeld, err
		}
	}
	defer func() { <-gs.rel }()
	gs.mu.Lock()
	lostBefore := gs.lost && logMsg == ""
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
	if lostBefore && err == nil && st == freed {
		// An Unlock of a group that was lost before it: the loss released
		// what the group still held (memberEnded), whatever its reason, a
		// lost connection's included, so the members found freed were
		// freed then (or by a retry of that release), not by this Unlock,
		// and another owner may hold them since. The group held until its
		// loss at most, and the Client stopped vouching for it there: not
		// held, with its loss reason. (A Mutex lease lost with its
		// connection leaves its key held instead, and its Unlock frees it.)
		return notHeld, nil
	}
	if err != nil {
		gs.errored = true
	} else if st == notHeld && !gs.errored {
		// Found lost: report it with its reason, as Lease.Unlock would with
		// ErrExpired. (After a release with no answer, Lease.Unlock decides.)
		gs.h.lose(reason)
	}
	return st, err
}

// errUnknownOutcome is the error of a release whose outcome is unknown
// without an error of its own.
var errUnknownOutcome = errors.New("redisync: release: outcome unknown")

// outcome reads what the releases of the members found: freed when the
// group held until released, notHeld and the reason when not, an error
// when that is unknown. Called holding rel.
func (gs *groupState) outcome() (st releaseState, reason, err error) {
	if gs.quorum {
		return gs.quorumOutcome()
	}
	for _, m := range gs.members {
		switch m.state {
		case memberFreed:
		case memberGone:
			if reason == nil {
				reason = errorf("lock %q of the group: %w", m.m.name, cmp.Or(m.reason, ErrExpired))
			}
		default:
			err = cmp.Or(err, m.err, errUnknownOutcome)
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

// quorumOutcome is the outcome of a quorum's release: freed when a majority
// released it, unknown while the members whose releases had no answer may
// still make one.
func (gs *groupState) quorumOutcome() (st releaseState, reason, err error) {
	released, open := 0, 0
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
		return notHeld, nil, cmp.Or(err, errUnknownOutcome)
	}
	return notHeld, errorf("%w: %d of %d servers held %q, %d needed: %w", ErrNoQuorum, released, len(gs.members), gs.name, gs.need, joinedErrs(reasons)), nil
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

// byScript groups the indexes of the members that keep selects by what one
// script can reach: one Client and, on a Cluster, one slot. The buckets and
// the indexes in each are in the order of the members.
func byScript(ms []*member, keep func(*member) bool) [][]int {
	type bucketKey struct {
		c    *Client
		slot uint16
	}
	var order []bucketKey
	buckets := make(map[bucketKey][]int)
	for i, m := range ms {
		if !keep(m) {
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
	out := make([][]int, len(order))
	for b, k := range order {
		out[b] = buckets[k]
	}
	return out
}

// eachBucket runs f for every bucket at once, and returns when all of them
// returned.
func eachBucket(buckets [][]int, f func(b int, idx []int)) {
	if len(buckets) == 1 {
		f(0, buckets[0])
		return
	}
	var wg sync.WaitGroup
	for b, idx := range buckets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(b, idx)
		}()
	}
	wg.Wait()
}

// scriptContext bounds one script of a bucket by timeout, if not 0.
func scriptContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout > 0 {
		return context.WithTimeout(ctx, timeout)
	}
	return ctx, func() {}
}

// releaseMembers releases every member that may hold its lock, with one
// group release script per Client and slot, all sent at once, and records
// the outcome in each member. A member still held is released as
// Lease.Unlock would release its lease; the others by owner id. timeout, if
// not 0, bounds each script.
func releaseMembers(ctx context.Context, ms []*member, timeout time.Duration) {
	buckets := byScript(ms, func(m *member) bool {
		if m.state == memberFreed || m.state == memberGone {
			return false
		}
		if m.state != memberNone && m.c.isClosed() {
			// Close released what its watchdog held; nothing can be sent.
			// A member never granted (the undo of an attempt whose reply
			// came late, which Close waits for) is released by owner id
			// all the same: the connection stays open until the undos are
			// done.
			m.state, m.reason = memberGone, ErrClosed
			return false
		}
		return true
	})
	eachBucket(buckets, func(_ int, idx []int) {
		bucket := make([]*member, len(idx))
		for j, i := range idx {
			bucket[j] = ms[i]
		}
		releaseBucket(ctx, bucket, timeout)
	})
}

// releaseBucket runs the group release script for members of one Client
// and slot.
func releaseBucket(ctx context.Context, ms []*member, timeout time.Duration) {
	ctx, cancel := scriptContext(ctx, timeout)
	defer cancel()
	c := ms[0].c
	keys := make([]string, 0, 4*len(ms))
	args := make([]string, 1, 1+3*len(ms))
	args[0] = c.cfg.retentionArg
	// Counted as in flight until the answers are applied: a renewal
	// answered in between never reads a released lock as lost.
	var releasing []*holder
	for _, m := range ms {
		keys = append(keys, m.m.keys.lock, m.m.keys.queue, m.m.keys.waiters)
		args = append(args, m.owner, m.hold, m.m.keys.channel)
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

// live reports whether the member is held through a lease not lost.
func (m *member) live() bool {
	return m.state == memberHeld && m.lease.Err() == nil
}

// raiseFences makes T, the greatest token of the held members, the floor
// of every later token of their locks: the fencing counter of every member
// with a lower token is raised to T while its owner holds it, with one
// script per Client and slot, all sent at once. It returns T and, per
// member, whether its counter is at T (false for members not held or lost
// by the time the raises answered, and for
// members whose raise fewer replicas acknowledged than WithReplicaAck asks
// for, with ErrNotReplicated among the errors). timeout,
// if not 0, bounds each script; errors of single scripts are returned only
// with their members false.
func raiseFences(ctx context.Context, ms []*member, timeout time.Duration) (uint64, []bool, error) {
	var token uint64
	for _, m := range ms {
		if m.live() {
			token = max(token, m.token)
		}
	}
	raised := make([]bool, len(ms))
	buckets := byScript(ms, func(m *member) bool { return m.live() && m.token != token })
	for i, m := range ms {
		raised[i] = m.live() && m.token == token
	}
	errs := make([]error, len(buckets))
	eachBucket(buckets, func(b int, idx []int) {
		errs[b] = raiseBucket(ctx, ms, idx, token, timeout, raised)
	})
	for i, m := range ms {
		// A member whose loss was reported while the counters were raised
		// (the one at T is asked nothing, and a raise's reply vouches only
		// for when it ran) no longer counts: the Client's memory of the
		// raise does not widen what Redis said since.
		raised[i] = raised[i] && m.live()
	}
	return token, raised, errors.Join(errs...)
}

// raiseBucket runs the group fence script for the members idx of ms, of
// one Client and slot, and records in raised which counters are at token.
func raiseBucket(ctx context.Context, ms []*member, idx []int, token uint64, timeout time.Duration, raised []bool) error {
	ctx, cancel := scriptContext(ctx, timeout)
	defer cancel()
	c := ms[idx[0]].c
	keys := make([]string, 0, len(idx))
	args := []string{strconv.FormatUint(token, 10)}
	for _, i := range idx {
		keys = append(keys, ms[i].m.keys.lock)
		args = append(args, ms[i].owner)
	}
	res, acked, err := raiseFenceScript(ctx, c, keys, args)
	if err == nil && len(res) != len(idx) {
		err = fmt.Errorf("%d answers for %d locks", len(res), len(idx))
	}
	if err != nil {
		return redisErr("raise fence", err)
	}
	if !acked {
		// A raise is part of the group's grant: a replica promoted without
		// it gives these locks' next owners tokens at or below T, which
		// the group's Lease already carries. So a raise fewer replicas
		// acknowledged counts as not made, as an acquisition's would.
		return fmt.Errorf("%w: the fencing counters of %d locks, within %v", ErrNotReplicated, len(idx), c.cfg.ackTimeout)
	}
	for j, i := range idx {
		raised[i] = res[j] == 1
	}
	return nil
}

// raiseFenceScript runs the group fence script on keys with args through
// c, and the WAIT that WithReplicaAck asks for: acked reports whether
// enough replicas acknowledged the raise (always, without WithReplicaAck).
func raiseFenceScript(ctx context.Context, c *Client, keys, args []string) (res []int64, acked bool, err error) {
	if c.cfg.ackReplicas == 0 {
		res, err = groupFenceScript.exec(ctx, c.rc, keys, args).AsIntSlice()
		return res, true, err
	}
	msg, n, err := groupFenceScript.execWaiting(ctx, c.rc, keys, args, c.cfg.ackReplicas, c.cfg.ackTimeout)
	if err != nil {
		return nil, false, err
	}
	res, err = msg.AsIntSlice()
	return res, n >= int64(c.cfg.ackReplicas), err
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
