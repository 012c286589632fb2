package redisync

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The lock model of the randomized tests: porcupine checks that the
// ownerships of each exclusive lock name (a Mutex, a FairMutex, an
// RWMutex's write lock, each member of a Group) form a history of a lock
// service whose sequential specification is
//
//   - acquire(o, token): allowed only while nobody owns the name and token
//     is above every token seen on it; o then owns it;
//   - reenter(o, token): allowed only while o owns the name (a re-entry, or
//     a Group re-entering a Mutex lease through its Context); a token above
//     the highest seen raises it (a Group's token fences every one of its
//     names); a token below o's own is a violation of its own, checked
//     apart from porcupine (a Group that re-enters a lease fences with at
//     least that lease's token);
//   - end(o): o owns the name no more; allowed only while o owns it, or, if
//     a ForceUnlock of the name could have ended o first, at any time;
//   - force: nobody owns the name.
//
// in real time. An ownership is one fresh acquisition (Redis or a local
// pass) and every re-entry of it; it spans from the acquisition's call to
// the end of its last lease. What the test knows of that end is an
// interval, and the end op's call and return are its bounds:
//
//   - it is not before the acquisition returned (a Lease is delivered only
//     when it is held for most of its lease ahead), unless a ForceUnlock
//     of the name may have run between the grant and the delivery (a reply
//     held back, a local pass delivered within its budget's time, which
//     WithLocalPasses allows after a ForceUnlock): then it is not before
//     the acquisition's call (a local pass's acquisition spans from the
//     start of its budget's time then: its token was reserved with its
//     block, before the ForceUnlock); nor before a moment
//     the lease was seen held: Deadline ok and in the future, with no
//     Unlock or Detach called yet (Deadline errs early: Redis expires the
//     key later);
//   - an Unlock that returned nil released it (or passed it on) in Redis
//     while it held: the end is between the first Unlock's call and that
//     return;
//   - a loss reported as ErrTakenOver or ErrForceUnlocked, or ErrExpired of
//     a watchdog lease, was found in Redis: the end is before the report
//     was seen; an Unlock of a lease not seen lost that returned ErrNotHeld
//     found the key gone;
//   - otherwise (ErrConnectionLost, ErrClosed, a fixed lease's expiry that
//     the Client reports a tenth of the lease early, Detach, an Unlock
//     that failed) the key may outlive the lease: the end may be any time
//     after its lower bound, and porcupine lets it take effect as late as
//     needed.
//
// A restart of Redis (killed, so a second of writes may be lost) splits
// the history into epochs that are checked apart: an acquisition or
// ForceUnlock across a restart is left out, an ownership that began before
// one may end at any time after it began.
//
// A failover to a replica (see failover in schedule_failover_test.go) is
// not a restart: every grant was acknowledged by the replica
// (WithReplicaAck), so no ownership is left out; only what is not waited
// for may be lost, renewals among them. A lease live when the failover
// began (or delivered while it went on) is held on the promoted replica at
// least until its lapse, its Deadline as it was then, and from then on only
// if its Client renewed it, or released it, on the new primary: its end
// may come as early as its lapse otherwise.
type lockInput struct {
	kind   int   // lockAcquire, lockReenter, lockEnd, lockForce
	id     int64 // the ownership
	token  uint64
	forced bool // end: a ForceUnlock may have ended it first
	desc   string
}

const (
	lockAcquire = iota
	lockReenter
	lockEnd
	lockForce
)

type lockState struct {
	holder int64
	last   uint64
}

var lockModel = porcupine.Model{
	Init: func() any { return lockState{} },
	Step: func(state, input, _ any) (bool, any) {
		st, in := state.(lockState), input.(lockInput)
		switch in.kind {
		case lockAcquire:
			return st.holder == 0 && in.token > st.last, lockState{in.id, in.token}
		case lockReenter:
			return st.holder == in.id, lockState{st.holder, max(st.last, in.token)}
		case lockEnd:
			if st.holder == in.id {
				return true, lockState{0, st.last}
			}
			return in.forced, st
		default:
			return true, lockState{0, st.last}
		}
	},
	DescribeOperation: func(input, _ any) string { return input.(lockInput).desc },
	DescribeState: func(state any) string {
		st := state.(lockState)
		return fmt.Sprintf("holder o%d, last token %d", st.holder, st.last)
	},
}

// lockHistory collects the ownerships of one schedule (or one run of
// TestFencedLinearizable) for the lock model.
type lockHistory struct {
	begin time.Time
	mu    sync.Mutex
	// failing: a failover began and the old primary was not killed yet;
	// killed: when it was (zero before a failover).
	failing bool
	killed  time.Time
	nextID  int64
	owns    []*ownership
	reents  []*reentryOp
	forces  []forceOp
}

// ownership is one fresh acquisition of one lock name.
type ownership struct {
	id        int64
	res       string
	token     uint64
	client    int
	call, ret time.Time
	lives     []*leaseLife // its lease and its re-entries
	// endFromCall: a ForceUnlock may have ended it before its lease was
	// delivered (its reply, or a local pass within its budget's time,
	// came after the ForceUnlock): its end is not after its delivery but
	// after its call.
	endFromCall bool
}

type reentryOp struct {
	own       *ownership
	token     uint64
	client    int
	call, ret time.Time
}

type forceOp struct {
	res       string
	client    int
	call, ret time.Time
}

// leaseLife is what the test saw of one delivered lease's end.
type leaseLife struct {
	fixed     bool
	owns      map[string]*ownership // by name: the ownership it belongs to
	delivered time.Time
	witness   time.Time // the latest moment it was seen held
	stopCall  time.Time // the first Unlock or Detach call
	released  time.Time // the return of an Unlock that returned nil
	gone      time.Time // a moment its hold was known gone
	// lease is the delivered lease, and lapse, when a failover went on
	// while it was live, its Deadline as the failover began (or as it was
	// delivered during the failover): the promoted replica holds it at
	// least until then (see failover).
	lease *Lease
	lapse time.Time
}

func newLockHistory(begin time.Time) *lockHistory { return &lockHistory{begin: begin} }

// acquired records a lease delivered at ret of an acquisition called at
// call: a fresh ownership of each of fresh, and a re-entry of each
// ownership in reenters. It returns the lease's life.
func (h *lockHistory) acquired(client int, token uint64, fixed bool, call, ret time.Time, fresh []string, reenters map[string]*ownership) *leaseLife {
	h.mu.Lock()
	defer h.mu.Unlock()
	lf := &leaseLife{fixed: fixed, owns: map[string]*ownership{}, delivered: ret, witness: ret}
	for _, res := range fresh {
		h.nextID++
		o := &ownership{id: h.nextID, res: res, token: token, client: client, call: call, ret: ret, lives: []*leaseLife{lf}}
		h.owns = append(h.owns, o)
		lf.owns[res] = o
	}
	for res, o := range reenters {
		o.lives = append(o.lives, lf)
		h.reents = append(h.reents, &reentryOp{own: o, token: token, client: client, call: call, ret: ret})
		lf.owns[res] = o
	}
	return lf
}

// track records l as the lease of lf, delivered just now: during a
// failover its lapse is its Deadline now.
func (h *lockHistory) track(lf *leaseLife, l *Lease) {
	if lf == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	lf.lease = l
	if h.failing {
		lf.setLapse()
	}
}

// setLapse sets lf's lapse to its lease's Deadline now, if it has one.
func (lf *leaseLife) setLapse() {
	if lf.lease == nil || !lf.released.IsZero() || !lf.gone.IsZero() {
		return
	}
	if dl, ok := lf.lease.Deadline(); ok {
		lf.lapse = dl
	}
}

// failingOver records that a failover began: everything Redis did before
// is on the replica it promotes. Each live lease's lapse is its Deadline
// now: the last renewal that replied before now is on the replica.
func (h *lockHistory) failingOver() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failing = true
	for _, o := range h.owns {
		for _, lf := range o.lives {
			lf.setLapse()
		}
	}
}

// failedOver records that the old primary was killed at killed.
func (h *lockHistory) failedOver(killed time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failing, h.killed = false, killed
}

// renewedAfter reports whether the last renewal (or acquisition) of l that
// succeeded was sent after at: by a Client that sent it after the old
// primary was killed, it was made on the new primary, which so held l's
// hold throughout. A Group's lease (whose holds are its members') is never
// said to be.
func renewedAfter(l *Lease, at time.Time) bool {
	if l == nil || at.IsZero() || l.h == nil || l.h.kind.deadline != nil {
		return false
	}
	h := l.h
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastOK.After(at)
}

// seen describes, for a violation's report, what the test saw of the end
// of each lease of o, with times given by rel.
func (o *ownership) seen(rel func(time.Time) string) string {
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return rel(t)
	}
	var out []string
	for _, lf := range o.lives {
		out = append(out, fmt.Sprintf("[fixed %v, delivered %s, seen held %s, Unlock or Detach called %s, released %s, known gone %s, failover lapse %s]",
			lf.fixed, at(lf.delivered), at(lf.witness), at(lf.stopCall), at(lf.released), at(lf.gone), at(lf.lapse)))
	}
	if o.endFromCall {
		out = append(out, "a ForceUnlock may have ended it before its delivery")
	}
	return strings.Join(out, " ")
}

// lostBeforeDelivery records that a ForceUnlock may have ended the
// ownerships lf began before lf was delivered, after their grant was
// sent at granted. An ownership called after granted (a local pass, whose
// token was reserved with its block when the cohort's holder took or kept
// the lock) got its token then: its acquisition spans from granted.
func (h *lockHistory) lostBeforeDelivery(lf *leaseLife, granted time.Time) {
	if lf == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, o := range lf.owns {
		if len(o.lives) > 0 && o.lives[0] == lf {
			o.endFromCall = true
			if !granted.IsZero() && granted.Before(o.call) {
				o.call = granted
			}
		}
	}
}

// ownerOf returns the ownership of res that lf belongs to, or nil.
func (h *lockHistory) ownerOf(lf *leaseLife, res string) *ownership {
	if lf == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return lf.owns[res]
}

// witness records that l is held now if its Deadline says so and nobody
// called its Unlock or Detach yet.
func (h *lockHistory) witness(lf *leaseLife, l *Lease) {
	if lf == nil {
		return
	}
	t0 := time.Now()
	dl, ok := l.Deadline()
	t1 := time.Now()
	if !ok || !t1.Before(dl) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if lf.stopCall.IsZero() && t0.After(lf.witness) {
		lf.witness = t0
	}
}

// stopping records an Unlock or Detach called at.
func (h *lockHistory) stopping(lf *leaseLife, at time.Time) {
	if lf == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if lf.stopCall.IsZero() {
		lf.stopCall = at
	}
}

// unlocked records what an Unlock that returned at ret said; lostBefore
// tells whether Lost was closed when it was called.
func (h *lockHistory) unlocked(lf *leaseLife, ret time.Time, err error, lostBefore bool) {
	if lf == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
		if lf.released.IsZero() {
			lf.released = ret
		}
	case errors.Is(err, ErrNotHeld) && !lostBefore && !errors.Is(err, ErrReleased) && !errors.Is(err, ErrDetached) && !errors.Is(err, ErrClosed):
		h.goneLocked(lf, ret)
	}
}

// lost records a loss with reason err seen at.
func (h *lockHistory) lost(lf *leaseLife, at time.Time, err error) {
	if lf == nil {
		return
	}
	if errors.Is(err, ErrTakenOver) || errors.Is(err, ErrForceUnlocked) || (errors.Is(err, ErrExpired) && !lf.fixed) {
		h.mu.Lock()
		h.goneLocked(lf, at)
		h.mu.Unlock()
	}
}

func (h *lockHistory) goneLocked(lf *leaseLife, at time.Time) {
	if lf.gone.IsZero() || at.Before(lf.gone) {
		lf.gone = at
	}
}

// forced records a ForceUnlock of res.
func (h *lockHistory) forced(res string, client int, call, ret time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.forces = append(h.forces, forceOp{res: res, client: client, call: call, ret: ret})
}

// bounds returns what is known of the end of lf: not before lo, not after
// hi (forever when !known). killed is when a failover killed the old
// primary (zero when none did).
func (lf *leaseLife) bounds(killed time.Time) (lo, hi time.Time, known bool) {
	if !lf.released.IsZero() {
		lo = lf.stopCall
		if lo.IsZero() || lo.After(lf.released) {
			lo = lf.released
		}
		return later(lo, lf.delivered), lf.released, true
	}
	lo = later(lf.witness, lf.delivered)
	if !lf.lapse.IsZero() && lf.lapse.Before(lo) && !renewedAfter(lf.lease, killed) {
		// A failover may have taken its hold from its lapse on: what
		// renewed it since went to the old primary, and was lost. (An
		// Unlock that returned nil released it wherever it ran, above.)
		lo = lf.lapse
	}
	if !lf.gone.IsZero() {
		return lo, lf.gone, true
	}
	return lo, time.Time{}, false
}

// lockViolation is one failed check of the lock model.
type lockViolation struct {
	kind, text string
}

// check checks the history against the lock model, epoch by epoch and name
// by name; restarts are the [start, end] intervals of Redis restarts. It
// returns the violations found, each with its kind: "lock-two-holders",
// "lock-token-order", "lock-held-after-end" or "lock-not-linearizable"
// when porcupine finds no order but no simpler pair explains it.
func (h *lockHistory) check(restarts [][2]time.Time, name string, seed uint64) []lockViolation {
	h.mu.Lock()
	defer h.mu.Unlock()
	rel := func(t time.Time) int64 { return t.Sub(h.begin).Nanoseconds() }
	relS := func(t time.Time) string { return fmt.Sprintf("%.3fs", t.Sub(h.begin).Seconds()) }
	epochOf := func(from, to time.Time) (int, bool) {
		e := 0
		for _, r := range restarts {
			switch {
			case !r[1].After(from):
				e++
			case !r[0].After(to):
				return e, false // across a restart
			}
		}
		return e, true
	}
	restartAfter := func(e int) (time.Time, bool) {
		if e < len(restarts) {
			return restarts[e][0], true
		}
		return time.Time{}, false
	}
	type part struct {
		epoch int
		res   string
	}
	type span struct {
		o              *ownership
		lo, hi         time.Time
		known, forced  bool
		acqCall, acqRe time.Time
	}
	parts := map[part][]porcupine.Operation{}
	spans := map[part][]span{}
	var out []lockViolation
	for _, o := range h.owns {
		e, ok := epochOf(o.call, o.ret)
		if !ok {
			continue
		}
		var lo, hi time.Time
		known := true
		for _, lf := range o.lives {
			l, hh, k := lf.bounds(h.killed)
			lo = later(lo, l)
			if !k {
				known = false
			} else {
				hi = later(hi, hh)
			}
		}
		if o.endFromCall {
			lo = o.call
		}
		if r, ok := restartAfter(e); ok && (!known || hi.After(r)) {
			known = false
			if r.Before(lo) {
				lo = r
			}
		}
		if known && lo.After(hi) {
			out = append(out, lockViolation{"lock-held-after-end", fmt.Sprintf("%s: ownership o%d (token %d, c%d, acquired %s..%s) seen held at %s after its end was known at %s",
				o.res, o.id, o.token, o.client, relS(o.call), relS(o.ret), relS(lo), relS(hi))})
			lo = hi
		}
		p := part{e, o.res}
		forced := false
		for _, f := range h.forces {
			if f.res == o.res && !f.ret.Before(o.call) && (!known || !f.call.After(hi)) {
				forced = true
			}
		}
		parts[p] = append(parts[p], porcupine.Operation{ClientId: o.client,
			Input: lockInput{kind: lockAcquire, id: o.id, token: o.token, desc: fmt.Sprintf("acquire o%d token %d (c%d)", o.id, o.token, o.client)},
			Call:  rel(o.call), Return: rel(o.ret)})
		ret := int64(math.MaxInt64)
		if known {
			ret = rel(hi)
		}
		parts[p] = append(parts[p], porcupine.Operation{ClientId: o.client,
			Input: lockInput{kind: lockEnd, id: o.id, forced: forced, desc: fmt.Sprintf("end o%d (c%d, forced %v)", o.id, o.client, forced)},
			Call:  rel(lo), Return: ret})
		spans[p] = append(spans[p], span{o: o, lo: lo, hi: hi, known: known, forced: forced, acqCall: o.call, acqRe: o.ret})
	}
	for _, r := range h.reents {
		// A re-entry shares its ownership's token, and a Group that
		// re-enters it fences with a token at least as great: a token
		// below the ownership's would be refused by the resources the
		// ownership already wrote to.
		if r.token < r.own.token {
			out = append(out, lockViolation{kind: "reentry-token-below-ownership", text: fmt.Sprintf("%s: re-entry (c%d, called %s) of o%d has token %d, below the ownership's %d",
				r.own.res, r.client, relS(r.call), r.own.id, r.token, r.own.token)})
		}
		e, ok := epochOf(r.own.call, r.ret)
		if !ok {
			continue
		}
		p := part{e, r.own.res}
		parts[p] = append(parts[p], porcupine.Operation{ClientId: r.client,
			Input: lockInput{kind: lockReenter, id: r.own.id, token: r.token, desc: fmt.Sprintf("re-enter o%d token %d (c%d)", r.own.id, r.token, r.client)},
			Call:  rel(r.call), Return: rel(r.ret)})
	}
	for _, f := range h.forces {
		e, ok := epochOf(f.call, f.ret)
		if !ok {
			continue
		}
		p := part{e, f.res}
		parts[p] = append(parts[p], porcupine.Operation{ClientId: f.client,
			Input: lockInput{kind: lockForce, desc: fmt.Sprintf("force unlock (c%d)", f.client)},
			Call:  rel(f.call), Return: rel(f.ret)})
	}
	keys := make([]part, 0, len(parts))
	for p := range parts {
		keys = append(keys, p)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].epoch < keys[j].epoch || keys[i].epoch == keys[j].epoch && keys[i].res < keys[j].res
	})
	for _, p := range keys {
		res, info := porcupine.CheckOperationsVerbose(lockModel, parts[p], time.Minute)
		if res != porcupine.Illegal {
			continue
		}
		// Name the simplest explanations: two ownerships surely held at
		// one moment, a later ownership with a token not above an earlier
		// one's.
		found := false
		ss := spans[p]
		for i := range ss {
			for j := range ss {
				a, b := ss[i], ss[j]
				if i == j {
					continue
				}
				if i < j && !a.forced && !b.forced && a.acqRe.Before(b.lo) && b.acqRe.Before(a.lo) {
					found = true
					out = append(out, lockViolation{"lock-two-holders", fmt.Sprintf("%s: o%d (token %d, c%d, acquired %s..%s, held until %s at least) and o%d (token %d, c%d, acquired %s..%s, held until %s at least) held it at once; what was seen of their ends: o%d %s; o%d %s",
						p.res, a.o.id, a.o.token, a.o.client, relS(a.acqCall), relS(a.acqRe), relS(a.lo), b.o.id, b.o.token, b.o.client, relS(b.acqCall), relS(b.acqRe), relS(b.lo),
						a.o.id, a.o.seen(relS), b.o.id, b.o.seen(relS))})
				}
				if !a.forced && a.o.token < b.o.token && b.acqRe.Before(a.lo) && !(a.acqRe.Before(b.lo) && !b.forced) {
					found = true
					out = append(out, lockViolation{"lock-token-order", fmt.Sprintf("%s: o%d (token %d, c%d, acquired %s..%s) was still held at %s, after o%d with the higher token %d (c%d, acquired %s..%s) was delivered; what was seen of o%d's end: %s",
						p.res, a.o.id, a.o.token, a.o.client, relS(a.acqCall), relS(a.acqRe), relS(a.lo), b.o.id, b.o.token, b.o.client, relS(b.acqCall), relS(b.acqRe),
						a.o.id, a.o.seen(relS))})
				}
				// a came first when it was delivered before b began, or
				// while b surely held (it cannot come after b then).
				if (a.acqRe.Before(b.acqCall) || a.acqRe.Before(b.lo) && !b.forced) && a.o.token >= b.o.token {
					found = true
					out = append(out, lockViolation{"lock-token-order", fmt.Sprintf("%s: o%d (c%d, acquired %s..%s) has token %d, not above o%d's %d (c%d, acquired %s..%s)",
						p.res, b.o.id, b.o.client, relS(b.acqCall), relS(b.acqRe), b.o.token, a.o.id, a.o.token, a.o.client, relS(a.acqCall), relS(a.acqRe))})
				}
			}
		}
		// A re-entry that raised the token (a Group taken with a Mutex
		// lease's Context) fences every later ownership.
		for _, r := range h.reents {
			if r.own.res != p.res || r.token <= r.own.token {
				continue
			}
			for _, b := range ss {
				if b.o != r.own && b.o.token > r.own.token && b.o.token <= r.token {
					found = true
					out = append(out, lockViolation{"lock-token-order", fmt.Sprintf("%s: o%d (c%d, acquired %s..%s) has token %d, after o%d (token %d) whose re-entry (c%d, %s..%s) raised the token to %d",
						p.res, b.o.id, b.o.client, relS(b.acqCall), relS(b.acqRe), b.o.token, r.own.id, r.own.token, r.client, relS(r.call), relS(r.ret), r.token)})
				}
			}
		}
		if found {
			continue
		}
		path := filepath.Join(os.TempDir(), fmt.Sprintf("redisync-locks-%s-%d-%d.html", name, seed, len(out)))
		if err := porcupine.VisualizePath(lockModel, info, path); err != nil {
			path = "(not written: " + err.Error() + ")"
		}
		out = append(out, lockViolation{"lock-not-linearizable", fmt.Sprintf("%s (epoch %d): %d operations; visualization: %s", p.res, p.epoch, len(parts[p]), path)})
	}
	return out
}

// counts returns how many ownerships, re-entries and ForceUnlocks the
// history holds.
func (h *lockHistory) counts() (owns, reents, forces int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.owns), len(h.reents), len(h.forces)
}

// restartsOf returns the [start, end] of the restarts among faults.
func restartsOf(faults []fault) [][2]time.Time {
	var out [][2]time.Time
	for _, f := range faults {
		if f.kind == "restart" {
			out = append(out, [2]time.Time{f.start, f.end})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0].Before(out[j][0]) })
	return out
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestLockModel checks the lock model on histories made by hand: one
// ownership after another with rising tokens, a loss seen late while the
// next owner already holds, a ForceUnlock, and a next owner after a
// failover's lapse of a lease still seen held are linearizable; two
// holders at once (also before the lapse), a token that does not rise
// (also above the token a Group's re-entry raised it to) and a re-entry
// after its ownership ended and the next one began are not.
func TestLockModel(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	kinds := func(h *lockHistory) []string {
		var out []string
		for _, v := range h.check(nil, "model", 0) {
			out = append(out, v.kind)
		}
		return out
	}
	type lease struct {
		h  *lockHistory
		lf *leaseLife
	}
	acquire := func(h *lockHistory, token uint64, call, ret int) lease {
		return lease{h, h.acquired(0, token, false, at(call), at(ret), []string{"mutex:x"}, nil)}
	}
	unlock := func(l lease, call, ret int) {
		l.h.stopping(l.lf, at(call))
		l.h.unlocked(l.lf, at(ret), nil, false)
	}
	seen := func(l lease, ms int) {
		l.h.mu.Lock()
		l.lf.witness = at(ms)
		l.h.mu.Unlock()
	}

	h := newLockHistory(t0)
	a := acquire(h, 1, 0, 10)
	unlock(a, 20, 30)
	b := acquire(h, 2, 5, 25) // waited, got it as a released it
	seen(b, 40)
	h.lost(b.lf, at(100), ErrExpired) // lost unseen; the next owner took it
	c := acquire(h, 3, 50, 60)
	h.forced("mutex:x", 1, at(70), at(75))
	d := acquire(h, 4, 80, 90)
	unlock(d, 95, 99)
	h.lost(c.lf, at(120), ErrForceUnlocked)
	if k := kinds(h); len(k) != 0 {
		t.Fatalf("a legal history: %v", k)
	}

	// A lock passed on locally (token 2, reserved when the lock was taken
	// with token 1) and delivered after a ForceUnlock and another Client's
	// acquisition with token 3, within the pass's budget: legal when the
	// pass is known to have maybe lost its hold before its delivery, not
	// otherwise.
	// The same with a pass called after that acquisition returned: its
	// token was reserved with its block (at 8), before the ForceUnlock.
	for _, lostBefore := range []bool{true, false} {
		for _, called := range []int{5, 50} {
			h := newLockHistory(t0)
			a := acquire(h, 1, 0, 10)
			pass := acquire(h, 2, called, 60)
			h.forced("mutex:x", 1, at(40), at(41))
			acquire(h, 3, 42, 45)
			unlock(a, 55, 56)
			if lostBefore {
				h.lostBeforeDelivery(pass.lf, at(8))
			}
			if k := kinds(h); (len(k) == 0) != lostBefore {
				t.Errorf("a pass called at %d delivered after a ForceUnlock (lost before delivery %v): %v", called, lostBefore, k)
			}
		}
	}

	// A lease a failover may have taken from its lapse on (its Deadline as
	// the failover began): another owner may take the lock after the
	// lapse while the lease is still seen held, as its Client renewed it
	// on the old primary; not before the lapse, nor without one.
	for _, c := range []struct {
		lapse, next int // ms; lapse 0: no failover
		legal       bool
	}{{50, 60, true}, {85, 60, false}, {0, 60, false}} {
		h := newLockHistory(t0)
		a := acquire(h, 1, 0, 10)
		if c.lapse > 0 {
			h.failingOver()
			h.mu.Lock()
			a.lf.lapse = at(c.lapse)
			h.mu.Unlock()
			h.failedOver(at(40))
		}
		seen(a, 100)
		acquire(h, 2, c.next, c.next+10)
		if k := kinds(h); (len(k) == 0) != c.legal {
			t.Errorf("an owner after a failover's lapse at %dms, taken at %dms: %v, want legal %v", c.lapse, c.next, k, c.legal)
		}
	}

	reenter := func(h *lockHistory, of lease, token uint64, call, ret int) {
		h.acquired(0, token, false, at(call), at(ret), nil, map[string]*ownership{"mutex:x": h.ownerOf(of.lf, "mutex:x")})
	}
	for _, c := range []struct {
		name    string
		want    string // the kind of violation, or "" for any
		history func(h *lockHistory)
	}{
		{"two holders", "lock-two-holders", func(h *lockHistory) {
			seen(acquire(h, 1, 0, 10), 50)
			acquire(h, 2, 20, 30)
		}},
		{"a token that does not rise", "lock-token-order", func(h *lockHistory) {
			unlock(acquire(h, 5, 0, 10), 20, 30)
			acquire(h, 5, 40, 50)
		}},
		{"a token not above the one a re-entry raised it to", "lock-token-order", func(h *lockHistory) {
			a := acquire(h, 1, 0, 10)
			reenter(h, a, 10, 12, 14)
			unlock(a, 20, 30)
			acquire(h, 2, 15, 35)
		}},
		{"a re-entry with a token below its ownership's", "reentry-token-below-ownership", func(h *lockHistory) {
			a := acquire(h, 5, 0, 10)
			reenter(h, a, 4, 12, 14)
			unlock(a, 20, 30)
		}},
		{"a re-entry after its ownership ended and the next took the lock", "", func(h *lockHistory) {
			a := acquire(h, 1, 0, 10)
			unlock(a, 20, 30)
			acquire(h, 2, 32, 35)
			reenter(h, a, 1, 40, 50)
		}},
	} {
		h := newLockHistory(t0)
		c.history(h)
		if k := kinds(h); len(k) == 0 || c.want != "" && !slices.Contains(k, c.want) {
			t.Errorf("%s: %v, want %q", c.name, k, c.want)
		}
	}
}
