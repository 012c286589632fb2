package redisync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync/internal/engine"
)

// grant is what an acquisition learnt of a lock it holds in Redis: what
// the Lease is made of.
type grant struct {
	kind   *leaseKind
	name   string
	keys   lockKeys
	key    string // the key the watchdog renews
	parent *Lease // the lease re-entered, or nil
	owner  string
	hold   string
	token  int64
	lease  time.Duration
	// watchdog: renewed by the watchdog; otherwise a fixed lease.
	watchdog bool
	// sent is a moment before the key got its lease: when the command that
	// set it was sent.
	sent time.Time
	// initial, when not 0, is a shorter lease than lease that the key got
	// first (the lock handed over to a waiter): the watchdog renews the
	// full lease a third into it, and until then the lease ends as initial
	// does.
	initial time.Duration
	// shared, when not 0, is an expiry shorter than the lease that another
	// holder of a shared key set it to, as the acquisition found it (see
	// holder.shared).
	shared time.Duration
}

// first is the lease the key got first.
func (g *grant) first() time.Duration {
	if g.initial > 0 {
		return g.initial
	}
	return g.lease
}

// errLostBeforeDelivery reports a lock that was granted but found lost when
// its late grant was checked: a connection held up the reply, or the
// message that handed the lock over, for most of its lease. It is retried
// as a connection error is.
var errLostBeforeDelivery = errors.New("redisync: the lock was lost before its lease could be delivered")

// confirm renews the lease of a grant that arrived late, a third of its
// first lease or more after the command that set it was sent (the watchdog
// would have renewed it by then), and counts the grant from the renewal: a
// Lease is delivered only when it is held for most of its lease ahead. A
// fixed lease is renewed to its full length too: no watchdog renews it, so
// its acquisition is counted as done at the renewal. A lock found not held
// (expired, taken) is errLostBeforeDelivery. The caller confirms again
// when this renewal's own reply came late. It returns g as confirmed; g
// is taken by value so that a grant that needs no confirmation (the common
// case) is not moved to the heap.
func (c *Client) confirm(ctx context.Context, g grant) (grant, error) {
	sent := time.Now()
	kind, key, args := g.kind, g.key, []string{g.owner, strconv.FormatInt(g.lease.Milliseconds(), 10)}
	states, err := callInFlight(c, ctx, func(actx context.Context) ([]int64, error) {
		return kind.renew.exec(actx, c.rc, []string{key}, args).AsIntSlice()
	})
	switch {
	case err != nil:
		return g, redisErr("renew", err)
	case len(states) != 1 || !renewedHeld(states[0]):
		return g, errLostBeforeDelivery
	}
	g.sent, g.initial = sent, 0
	g.shared = narrower(g.shared, sharedExpiry(states[0]))
	return g, nil
}

// grant turns a successful acquire script run into a Lease: the first hold
// of a new holder, registered with the watchdog before it is returned, or
// one more hold of the parent's holder. It fails when the parent's
// ownership ended meanwhile; the caller then releases the hold.
func (c *Client) grant(ctx context.Context, g grant) (*Lease, error) {
	kind, key, parent, owner, hold := g.kind, g.key, g.parent, g.owner, g.hold
	if parent != nil && parent.h.owner == owner {
		h := parent.h
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.done {
			return nil, errorf("%w: the outer lease ended: %w", ErrNotHeld, h.err)
		}
		h.shared = narrower(h.shared, g.shared)
		l := newLease(ctx, h, hold)
		l.token = parent.token // a lease passed on locally has its own
		h.leases[l] = struct{}{}
		return l, nil
	}
	var h *holder
	var l *Lease
	for {
		// A grant that came late, with a watchdog lease or a fixed one,
		// may have expired meanwhile and the lock be another owner's: only
		// a renewal that finds it still held tells. A fixed lease is no
		// exception: its Deadline would be near or past at delivery, and
		// the lease delivered while another owner, with a higher token,
		// holds. A confirmation whose own reply came late leaves as little
		// of the lease ahead: it is confirmed again, until a renewal
		// answers in time (or ctx ends, or the lock is found lost).
		for parent == nil && g.late() {
			var err error
			if g, err = c.confirm(ctx, g); err != nil {
				return nil, err
			}
		}
		h, l = c.register(ctx, &g)
		if parent != nil || !g.late() {
			break
		}
		// The registration waited for the watchdog: the Client lapsed (a
		// pause of its process holds the watchdog up too), and the key may
		// have expired meanwhile and the lock be another owner's, which
		// nothing of the Client noticed while it lapsed. The Client's
		// memory of the grant may narrow what Redis says, never widen it:
		// the holder, which nobody received, is dropped, and the grant is
		// confirmed as a late reply is, before it is registered again.
		c.watchdog.remove(h)
	}
	if c.isClosed() && h.lose(ErrClosed) {
		// Close may have missed this holder.
		dctx, cancel := detached(ctx)
		defer cancel()
		if _, err := kind.unlock(dctx, h, hold); err != nil {
			c.log.Error("redisync: release after close failed; it expires with its lease", "key", key, "err", err)
		}
	}
	return l, nil
}

// late reports whether the grant comes a third of its first lease or more
// after the command that set the key's lease was sent: the watchdog would
// have renewed it by then, and the key may have expired since.
func (g *grant) late() bool { return time.Since(g.sent) > g.first()/3 }

// register makes the holder of a grant that is no re-entry, with its
// first Lease, and registers it with the watchdog.
func (c *Client) register(ctx context.Context, g *grant) (*holder, *Lease) {
	h := &holder{
		c: c, kind: g.kind, name: g.name, keys: g.keys, key: g.key, owner: g.owner, token: uint64(g.token),
		lease: g.lease, watchdog: g.watchdog, initial: g.initial, shared: g.shared,
		leases: make(map[*Lease]struct{}, 1), lastOK: g.sent, lost: make(chan struct{}),
	}
	l := newLease(ctx, h, g.hold)
	h.leases[l] = struct{}{}
	c.watchdog.add(h)
	return h, l
}

// reentryRefusal is an acquire script's refusal of a re-entry: the lock was
// not held by the parent's ownership in Redis (reason: ErrExpired,
// ErrForceUnlocked or ErrTakenOver). See refusedReentry.
type reentryRefusal struct{ reason error }

func (r *reentryRefusal) Error() string {
	return "redisync: re-entry refused: " + r.reason.Error()
}

func (r *reentryRefusal) Unwrap() error { return r.reason }

// refusedStateErr is the loss reason of a lock whose state a script
// reported for a refused re-entry: 1 force-unlocked, 0 free otherwise
// (expired), 2 held by another ownership.
func refusedStateErr(state int64) error {
	switch state {
	case 1:
		return ErrForceUnlocked
	case 0:
		return ErrExpired
	}
	return ErrTakenOver
}

// refusedReentry is err, the error of an attempt to re-enter parent (nil
// for an acquisition that is no re-entry), or when Redis refused the
// re-entry, the parent's loss. The Client's memory says the parent holds;
// Redis, which the script that would have added the hold read, says it
// does not, and Redis wins: the parent's holder is lost with the reason
// the script saw, unless a release of it is in flight (that explains a
// free lock, as it does for a renewal: the watchdog looks again).
func refusedReentry(parent *Lease, err error) error {
	var r *reentryRefusal
	if parent == nil || !errors.As(err, &r) {
		return err
	}
	h := parent.h
	h.mu.Lock()
	releasing := h.releasing > 0
	h.mu.Unlock()
	if !releasing {
		h.lose(r.reason)
	}
	h.mu.Lock()
	reason := h.err
	h.mu.Unlock()
	if reason == nil {
		reason = r.reason
	}
	return errorf("%w: the outer lease ended: %w", ErrNotHeld, reason)
}

// leaseKind is how the watchdog handles one kind of holder.
type leaseKind struct {
	// primitive names the kind in metrics: "mutex", "fair"...
	primitive string
	// renew renews (or, with a lease of "0", checks) a batch of holders of
	// one slot: KEYS[i] is a holder's key, ARGV[2i-1] its owner id, ARGV[2i]
	// its lease in milliseconds. It answers, per key, 1 (held), 0 (gone) or 2
	// (held by another owner).
	renew script
	// release frees everything a holder holds, when its Client closes; the
	// script run releaseAll builds.
	release    script
	releaseAll func(h *holder) rueidis.LuaExec
	// unlock releases one hold of a holder ("" for all of them).
	unlock func(ctx context.Context, h *holder, hold string) (releaseState, error)
	// tracked marks kinds whose key is a lock hash with the holder's owner
	// id in its field "owner", held by one holder at a time: Redis can tell
	// the Client when it changes (see tracker).
	tracked bool
	// ownerField marks tracked kinds whose hash has the holder's owner id
	// as a field of its own (Redisson's layouts) rather than in "owner".
	ownerField bool
	// forceMarked marks kinds whose forced unlock leaves the owner it
	// removed in the lock hash's field "f": a holder that finds its lock
	// free can tell a forced unlock from an expiry.
	forceMarked bool
	// spansClients marks holders whose locks live on several Clients (the
	// holders of groups): their unlock deals with closed Clients itself, so
	// Lease.Unlock does not stop at a closed h.c.
	spansClients bool
	// deadline, if set, is the holder's deadline, which its own renewals do
	// not tell (a group's holder: its members are renewed).
	deadline func() time.Time
	// ext is the seam's kind this kind was made of (see kindOf), nil for
	// the Client's own kinds.
	ext *engine.Kind
}

// mutexKind is the kind of Mutex holders.
var mutexKind = &leaseKind{
	primitive:   "mutex",
	tracked:     true,
	forceMarked: true,
	renew:       renewScript,
	release:     releaseScript,
	releaseAll: func(h *holder) rueidis.LuaExec {
		return h.c.releaseExec(h.keys, h.owner, "")
	},
	unlock: func(ctx context.Context, h *holder, hold string) (releaseState, error) {
		return h.c.release(ctx, h.keys, h.owner, hold)
	},
}

// holder is one ownership in Redis: what the watchdog renews and what is
// lost as a whole. Re-entering a lock adds Leases to the same holder.
//
// The Client's memory of an ownership may narrow what Redis says, never
// widen it: its leases, its holds and "the parent still holds" stand for
// facts only Redis knows, and each is checked where it is used. A re-entry
// claims the ownership as Redis has it (the script that adds the hold
// checks owner and token, and refuses a lock that is free or another's:
// the holder is then lost); a release of every hold counts the re-entries
// on their way (Redisson's layouts, where the Client picks what to
// release); Redis may count more holds than the holder has leases (a
// re-entry whose reply is not back), never fewer, so the cohort never
// passes on an ownership that was re-entered; and a reply that comes after
// its lease ended changes nothing the Client believes (see cohort.keep).
type holder struct {
	c        *Client
	kind     *leaseKind
	name     string
	keys     lockKeys
	key      string // the key the watchdog renews
	owner    string
	token    uint64
	lease    time.Duration
	watchdog bool // renewed by the watchdog; otherwise a fixed lease
	// initial, when not 0, is the lease the key was given first, shorter
	// than lease, until the watchdog's first renewal.
	initial time.Duration
	// extended, when not 0, is the fixed lease the last Extend gave, from
	// lastOK (guarded by mu).
	extended time.Duration
	// unsureExtends counts the Extends sent whose reply did not settle
	// what they did: on their way, or whose reply never came or came after
	// the lease ended (guarded by mu). Redis may have given the lock a
	// later end than the lease's, which runOut then takes back.
	unsureExtends int
	// shared, when not 0, is the shortest expiry that the watchdog holder
	// of a key shared with other holders found that they had set it to,
	// shorter than its own lease (a Redisson read lock's hash, whose Java
	// readers each set it to their own lease): the last of them may die
	// and leave the key to expire that soon after its last renewal, so
	// the holder is renewed at a third of it and its deadline counts from
	// it (see sharedLease). Only ever narrowed; guarded by mu.
	shared time.Duration

	mu        sync.Mutex
	leases    map[*Lease]struct{} // live leases sharing this ownership
	lastOK    time.Time           // when the last successful acquire or renewal was sent
	tried     time.Time           // when the watchdog last sent a pass that included it
	releasing int                 // releases in flight: a renewal that finds the key gone is not a loss
	// freed: a release of one of its holds freed the lock in Redis while
	// another lease's release was on its way (see finish); the ownership
	// ends with its last lease.
	freed  bool
	done   bool      // released or lost: no longer renewed
	err    error     // the loss reason
	lostAt time.Time // when the loss was noticed
	lost   chan struct{}
	// detached is set once a lease of the ownership was detached: its hold
	// is left to expire, and the ownership is no longer renewed once its
	// last lease ends.
	detached bool
	// unheld is set once an Unlock of the ownership found that Redis
	// counts no hold of it any more: a loss reported then or later leaves
	// nothing for Close to release (see watchdog.lapse).
	unheld bool
	// reentered is set once a re-entry of the ownership is about to be
	// sent (leaseFrom), whether or not it is granted: from then on Redis may
	// count a hold that no Lease of the Client shows yet, and may have
	// raised the lock's token counter (a Group's token), so the lock is
	// never passed on locally again (see cohort).
	reentered bool

	// entering counts the re-entries of a Redisson kind whose script may
	// be on its way; wiping, the releases of every hold on their way, and
	// wipeUnsure, one that had no answer (see redissonRelease). Guarded by
	// mu.
	entering, wiping int
	wipeUnsure       bool
}

// deadline is when the lease could expire on the server, less a safety
// margin of a tenth of the lease: the local clock starts before the command
// that set the expiry was sent.
func (h *holder) deadline() time.Time {
	d := h.lease
	switch {
	case h.extended > 0:
		d = h.extended
	case h.initial > 0:
		d = h.initial
	}
	if s := h.sharedLease(); s > 0 && s < d {
		// Another holder of the key may set it to expire this soon after
		// the last renewal: Redis's expiry, not the lease, bounds it.
		d = s
	}
	return h.lastOK.Add(d - d/10)
}

// minSharedRenewal is the shortest renewal period the expiry of a shared
// key brings a holder to (see holder.shared).
const minSharedRenewal = 100 * time.Millisecond

// sharedLease is the expiry other holders of h's shared key may give it,
// as h counts it (0: none seen): the shortest it found, but at least three
// times minSharedRenewal, since a remaining time that short is the end of
// another holder's lease, not a lease (the key was renewed to h's lease
// when h found it). Call it with h.mu held.
func (h *holder) sharedLease() time.Duration {
	if h.shared <= 0 || !h.watchdog {
		return 0
	}
	return max(h.shared, 3*minSharedRenewal)
}

// renewedHeld reports whether a renewal script's answer for a key says
// its owner holds it: 1, or a negative -n (see sharedExpiry).
func renewedHeld(state int64) bool { return state == 1 || state < 0 }

// sharedExpiry is the expiry a renewal's answer for a held key reports
// other holders of the key had set it to, shorter than its holder's lease
// (an answer of -n: n ms); 0 when it reports none.
func sharedExpiry(state int64) time.Duration {
	if state >= 0 {
		return 0
	}
	return time.Duration(-state) * time.Millisecond
}

// narrower is the shorter of two expiries of a shared key, 0 meaning none.
func narrower(a, b time.Duration) time.Duration {
	if a <= 0 || b > 0 && b < a {
		return b
	}
	return a
}

// lose ends the ownership with reason err: Lost closes, every lease's
// context is cancelled with err as its cause. It reports whether this call
// ended it.
//
// A loss is logged at WARN and counted in Metrics.Lost only when somebody
// holds a lease of the ownership: not when its only leases were abandoned
// before anybody received them, and not when its Client closed (Debug).
func (h *holder) lose(err error) bool {
	return h.end(err, false)
}

// runOut ends a fixed lease whose time is up: reported as ErrExpired, but
// logged at Debug and counted in Metrics.Expired rather than Metrics.Lost,
// since running out is often what a fixed lease is for.
//
// An Extend whose reply did not settle what it did (see unsureExtends) may
// have given the lock an end in Redis far past the lease's, which no lease
// holds: the ownership is released then, in the background, so that the
// lock is not left held until that end for nobody. Sent after the Extend on
// the same connection, the release runs after it.
func (h *holder) runOut() bool {
	if !h.end(ErrExpired, true) {
		return false
	}
	h.mu.Lock()
	unsure := h.unsureExtends > 0
	h.mu.Unlock()
	if unsure {
		c := h.c
		c.cleanupUntil(context.Background(), func(ctx context.Context) {
			e := h.kind.releaseAll(h)
			if err := h.kind.release.exec(ctx, c.rc, e.Keys, e.Args).Error(); err != nil {
				c.log.Warn("redisync: release of a fixed lease that ran out while it was extended failed; it expires with the extension", "key", h.key, "err", err)
			}
		}, closedChan, nil)
	}
	return true
}

// end is lose, and runOut when ranOut.
func (h *holder) end(err error, ranOut bool) bool {
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		return false
	}
	h.done, h.err, h.lostAt = true, err, time.Now()
	leases := h.leases
	h.leases = nil
	var lost []chan struct{}
	var cohorts []*Lease
	for l := range leases {
		if l.lost != nil {
			lost = append(lost, l.lost)
		}
		if l.co != nil {
			cohorts = append(cohorts, l)
		}
	}
	h.mu.Unlock()
	// The Client's goroutines that wait for the lock acquire it in Redis.
	for _, l := range cohorts {
		l.co.lose(l)
	}
	// Contexts first: whoever sees Lost closed finds their cause set.
	received := false
	for l := range leases {
		received = received || !l.unreceived()
		l.endContext(err)
	}
	h.c.watchdog.remove(h)
	switch {
	case !received:
		h.c.log.Debug("redisync: lease ended before anybody received it", "key", h.key, "reason", err)
	case err == ErrClosed:
		h.c.log.Debug("redisync: lease lost", "key", h.key, "reason", err)
	case ranOut:
		h.c.log.Debug("redisync: fixed lease ran out", "key", h.key)
	default:
		h.c.log.Warn("redisync: lease lost", "key", h.key, "reason", err)
	}
	switch m := h.c.cfg.metrics; {
	case !received:
	case ranOut && m.Expired != nil:
		m.Expired(h.kind.primitive, h.name)
	case !ranOut && m.Lost != nil:
		m.Lost(h.kind.primitive, h.name, err)
	}
	// Last: whoever sees Lost closed finds the loss reported everywhere.
	close(h.lost)
	for _, ch := range lost {
		close(ch)
	}
	return true
}

// beginRelease counts a release of h in flight: until it ends, a renewal or
// a check that finds the key gone or taken is no loss.
func (h *holder) beginRelease() {
	h.mu.Lock()
	h.releasing++
	h.mu.Unlock()
}

// endRelease ends what beginRelease counted. Call it after the release's
// outcome was applied (finish, lose), so that an answer about the key that
// arrives in between never reads a released lock as lost. An ownership
// that lives on is tracked again: its key changed.
func (h *holder) endRelease() {
	h.mu.Lock()
	h.releasing--
	alive := !h.done
	// A lock freed while this release was on its way (see finish): leases
	// still live once every release was applied hold nothing in Redis.
	lost := alive && h.freed && h.releasing == 0 && len(h.leases) > 0
	h.mu.Unlock()
	switch {
	case lost:
		h.lose(ErrExpired)
	case alive:
		h.c.tracker.retrack(h)
	}
}

// Lease is one acquisition of a lock. It is safe for concurrent use.
//
// A Lease from Acquire may report a failed acquisition: then Err is not nil,
// Lost and Context are already done and Unlock returns ErrNotHeld. A Lease
// Acquire delivered is claimed by the first call of Err, Lost, Unlock,
// Context or Token; if the context given to Acquire ends before that, the
// lock is released and the Lease reports the context's error. So a Lease
// whose Err returned nil holds its lock until Unlock or loss.
type Lease struct {
	h     *holder // nil when the acquisition failed
	hold  string
	since time.Time // when it was granted
	// A Mutex lease that may be passed on locally (see cohort) has its
	// cohort, its own token (0: the holder's) and its own Lost channel,
	// closed by the holder's loss while the lease is among its leases
	// (guarded by h.mu until the lease is delivered).
	co    *cohort
	token uint64
	lost  chan struct{}

	mu sync.Mutex
	// The lease's context is made by the first call of Context, from
	// parent; cause is why the lease ended, once it did.
	parent   context.Context
	ctx      context.Context
	cancel   context.CancelCauseFunc
	cause    error
	released bool
	detached bool      // released by Detach, not Unlock
	failed   error     // why the acquisition failed, or why it was abandoned
	unsure   time.Time // when a release whose outcome is unknown was sent
	// offered is set while Acquire offers the lease and nobody has used it:
	// if ctx ends first, it is abandoned. The first call of a method that
	// tells whether it is held (Err, Lost, Unlock, Context, Token) claims
	// it, under mu, so that a lease seen held is never abandoned after.
	offered     bool
	stopReclaim func() bool // stops Acquire's reclaim of an unclaimed lease
	// passedOn is set when the lock was passed on from this lease to
	// another goroutine of its Client (guarded by mu and co.mu).
	passedOn bool
	// keeping is closed when an Unlock of this lease that asked Redis to
	// keep the lock (cohort.keep) is done, and nil while none is on its
	// way (guarded by co.mu).
	keeping chan struct{}
}

// claim marks an offered lease as received. Call it with l.mu held.
func (l *Lease) claim() {
	if l.offered {
		l.offered = false
		if stop := l.stopReclaim; stop != nil {
			l.stopReclaim = nil
			stop()
		}
	}
}

// ended claims the lease and reports what ended it on this side: the
// acquisition's error, ErrDetached or ErrReleased; nil otherwise (a loss
// is the holder's to report).
func (l *Lease) ended() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claim()
	switch {
	case l.failed != nil:
		return l.failed
	case l.detached:
		return ErrDetached
	case l.released:
		return ErrReleased
	}
	return nil
}

// unreceived reports whether Acquire offered the lease and nobody used it.
func (l *Lease) unreceived() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.offered
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// failedLease is the Lease Acquire delivers when acquisition fails.
func failedLease(err error) *Lease {
	return &Lease{failed: err, cause: err}
}

// ctxKey finds the lease a context carries for one lock of one client.
type ctxKey struct {
	c    *Client
	lock string
}

// leaseFrom returns the live lease ctx carries for the lock, if any: the
// parent of a re-entry about to be made. Its ownership is marked
// re-entered (holder.reentered) in the step that finds the lease among the
// ownership's leases, under h.mu as a local pass is: so a lease that
// passed the lock on is no parent (the acquisition is a new one), and no
// local pass comes after a re-entry was sent, whatever its reply.
func leaseFrom(ctx context.Context, c *Client, keys lockKeys) *Lease {
	return leaseFromKey(ctx, ctxKey{c, keys.lock})
}

// leaseFromKey is leaseFrom with the lock's ctxKey boxed by the caller
// (lockWords.leaseKey), which then costs no allocation.
func leaseFromKey(ctx context.Context, key any) *Lease {
	l, _ := ctx.Value(key).(*Lease)
	if l == nil || l.Err() != nil {
		return nil
	}
	h := l.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, live := h.leases[l]; !live || h.done {
		return nil
	}
	h.reentered = true
	return l
}

// newLease makes the Lease for one hold of h, its context derived from the
// values (not the cancellation) of the acquiring context.
func newLease(parent context.Context, h *holder, hold string) *Lease {
	return &Lease{h: h, hold: hold, since: time.Now(), parent: parent}
}

// endContext cancels the lease's context with reason, or, before Context
// made it, keeps reason for it. The first reason stays.
func (l *Lease) endContext(reason error) {
	l.mu.Lock()
	if l.cause == nil {
		l.cause = reason
	}
	cancel := l.cancel
	l.mu.Unlock()
	if cancel != nil {
		cancel(reason)
	}
}

// Unlock releases this acquisition. A lease that re-entered its lock
// releases only its own hold; the lock is free once every hold is released.
//
// An Unlock whose ctx has already ended sends nothing and returns ctx's
// error: the lease still holds, renewed as before, until a retry releases
// it. A deferred Unlock that must release after a request's context ended
// passes context.WithoutCancel(ctx).
//
// Unlock is safe to retry: after an error from Redis or from ctx, calling
// it again never releases anyone else's lock, and does not report a false
// ErrNotHeld for an attempt sent before the lease's Deadline: one that
// reached Redis freed the lock, and the retry returns nil even when the
// lock has changed hands since. An attempt sent after the Deadline may have
// found the lock expired already; when the lock has changed hands since,
// Redis cannot tell which, and the retry reports ErrNotHeld.
//
// It returns ErrNotHeld (errors.Is) when the lease no longer holds the
// lock: already released, lost (the error then also matches the loss
// reason), or never acquired. If the lease was reported lost while its key
// still held it (ErrConnectionLost, ErrClosed), Unlock still frees the key
// and returns nil. After a successful Unlock, Err returns ErrReleased,
// Context is cancelled and Lost stays open. Of two Unlocks of one Lease at
// once, one releases the lock or passes it on locally (see Mutex) and the
// other waits for its outcome when it kept the lock for the Client's
// goroutines: a Lease never releases the hold of a Lease it passed the
// lock on to.
func (l *Lease) Unlock(ctx context.Context) error {
	if l == nil {
		return fmt.Errorf("%w: nil lease", ErrNotHeld)
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if err := l.ended(); err != nil {
		return errorf("%w: %w", ErrNotHeld, err)
	}
	h := l.h
	if h == nil {
		return fmt.Errorf("%w: not a Lease from a lock", ErrNotHeld)
	}
	if !h.kind.spansClients && h.c.isClosed() {
		return errorf("%w: %w", ErrNotHeld, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		// Nothing is sent on an ended context: the lease still holds, and
		// a retry reports what Redis says then.
		return err
	}
	// A Mutex passed on locally (cohort) passes now, or asks Redis to keep
	// the lock for its waiters (keep), or releases it; ended then lets the
	// next waiter lead.
	var keep bool
	var ended func()
	if co := l.co; co != nil {
		var st unlockState
		var err error
		if st, ended, err = co.settle(ctx, l, true); err != nil {
			return err
		}
		switch st {
		case unlockGone:
			reason := l.ended()
			if reason == nil {
				reason = ErrReleased
			}
			return errorf("%w: %w", ErrNotHeld, reason)
		case unlockPassed:
			l.passed()
			return nil
		case unlockKeep:
			keep = true
			defer co.endKeep(l)
		}
	}
	defer func() {
		if ended != nil {
			ended()
		}
	}()
	h.beginRelease()
	defer h.endRelease()
	sent := time.Now()
	var st releaseState
	var err error
	if keep {
		var passed bool
		if passed, st, err, ended = l.co.keep(ctx, l); passed {
			l.passed()
			return nil
		}
	} else {
		st, err = h.kind.unlock(ctx, h, l.hold)
	}
	l.mu.Lock()
	unsure := l.unsure
	switch {
	case err != nil && unsure.IsZero():
		l.unsure = sent
	case err == nil && !unsure.IsZero():
		l.unsure = time.Time{}
	}
	l.mu.Unlock()
	h.mu.Lock()
	lostAt := h.lostAt
	if err == nil && st != stillHeld {
		h.unheld = true
	}
	h.mu.Unlock()
	if err != nil {
		return err
	}
	if st != stillHeld && !lostAt.IsZero() {
		// Redis no longer counts a hold of the ownership: Close has
		// nothing left to release for it. A loss reported after lostAt was
		// read finds unheld set, and keeps nothing.
		h.c.watchdog.released(h)
	}
	if st == notHeld && !unsure.IsZero() && (lostAt.IsZero() || lostAt.After(unsure)) && unsure.Before(h.vouchedUntil()) {
		// An earlier attempt, whose reply never came, was sent while the
		// Client vouched for the hold (before the lease's deadline and any
		// loss it saw): it reached Redis while the lease held, freed the
		// lock, and the lock has moved on since, out of reach of the release
		// mark the script keeps. One sent after the deadline may have found
		// the lock expired already: Redis cannot tell which, and the
		// Client's memory may not widen what Redis says, so that lease is
		// reported lost below.
		st = freed
	}
	if st == notHeld {
		// Lost, and perhaps not noticed yet.
		h.lose(ErrExpired)
		h.mu.Lock()
		reason := h.err
		h.mu.Unlock()
		l.fail(reason)
		return errorf("%w: %w", ErrNotHeld, reason)
	}
	l.end(ErrReleased)
	if st == freed {
		h.finish()
	}
	if f := h.c.cfg.metrics.Released; f != nil {
		f(h.kind.primitive, h.name, time.Since(l.since))
	}
	return nil
}

// passed ends a lease of a Mutex that passed the lock on locally.
func (l *Lease) passed() {
	l.end(ErrReleased)
	l.co.drop()
	if f := l.h.c.cfg.metrics.Released; f != nil {
		f(l.h.kind.primitive, l.h.name, time.Since(l.since))
	}
}

// end marks the lease released and cancels its context with reason.
func (l *Lease) end(reason error) {
	l.mu.Lock()
	l.released = true
	l.claim()
	l.mu.Unlock()
	h := l.h
	h.mu.Lock()
	delete(h.leases, l)
	// The last lease of an ownership one of whose leases was detached
	// leaves the detached hold to expire: nobody renews it any more. The
	// last lease of an ownership that a release freed while this lease's
	// own release was on its way (see finish) ends it.
	letGo := (h.detached || h.freed) && len(h.leases) == 0 && !h.done
	if letGo {
		h.done = true
	}
	h.mu.Unlock()
	if letGo {
		h.c.watchdog.remove(h)
	}
	l.endContext(reason)
}

// fail marks a lease that turned out not to hold its lock.
func (l *Lease) fail(reason error) {
	l.mu.Lock()
	if l.failed == nil {
		l.failed = reason
	}
	l.mu.Unlock()
	l.end(reason)
}

// finish ends an ownership whose lock was freed by a release: it is no
// longer renewed, and leases of it still open learn that they lost it.
//
// Leases left (re-entries, a Group's member) had their holds in Redis no
// more, so they are lost, unless another release of the ownership is on its
// way (the caller's own is still counted): Unlocks of two of its leases at
// once may free the lock with the second release to run while the first
// one's reply is not applied yet, and that lease was released, not lost.
// The ownership then ends with its last lease (end), or, once no release
// is on its way, leases still live are lost (endRelease).
func (h *holder) finish() {
	h.mu.Lock()
	rest := len(h.leases)
	wait := rest > 0 && h.releasing > 1
	switch {
	case rest == 0:
		h.done = true
	case wait:
		h.freed = true
	}
	h.mu.Unlock()
	switch {
	case rest == 0:
		h.c.watchdog.remove(h)
	case !wait:
		h.lose(ErrExpired)
	}
}

// Lost returns a channel that is closed when the lease is lost: the
// watchdog could not renew it in time (ErrConnectionLost), its key expired
// or was deleted (ErrExpired), force-unlocked (ErrForceUnlocked), another
// owner holds it (ErrTakenOver), or the Client was closed (ErrClosed). Err
// then tells which. A change on the server's side is noticed about one
// round trip after it when the Client's LossDetection is DetectOnChange,
// at the next renewal otherwise. It is not closed by a successful Unlock or
// by Detach (use Context for "ended for any reason"), and never for a lease
// whose Unlock returned nil. For a failed acquisition it is already closed.
func (l *Lease) Lost() <-chan struct{} {
	if l == nil || l.h == nil {
		return closedChan
	}
	l.mu.Lock()
	l.claim()
	failed := l.failed
	l.mu.Unlock()
	if failed != nil {
		return closedChan
	}
	if l.lost != nil {
		return l.lost
	}
	return l.h.lost
}

// Err returns nil while the lease holds its lock. Otherwise it returns why
// not: the acquisition error, ErrReleased after Unlock, or the loss reason
// (ErrExpired, ErrTakenOver, ErrConnectionLost, ErrClosed).
func (l *Lease) Err() error {
	if l == nil {
		return fmt.Errorf("%w: nil lease", ErrNotHeld)
	}
	if err := l.ended(); err != nil {
		return err
	}
	if l.h == nil {
		return fmt.Errorf("%w: not a Lease from a lock", ErrNotHeld)
	}
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	return l.h.err
}

// Context returns a context that is cancelled when the lease ends, by Unlock
// or by loss; context.Cause returns the reason (ErrReleased or the loss
// reason). It carries the values of the context the lock was acquired with,
// and the lease itself: acquiring the same lock of the same Client with it
// (or a context derived from it) re-enters the lock instead of waiting. A
// re-entry claims the lease's ownership as Redis has it: the script that
// adds the hold checks that the lock is still held with the lease's owner
// id and token. When it is not (it expired, was force-unlocked or taken
// over, and the Client has not noticed yet), the re-entry fails at once
// with ErrNotHeld wrapping that reason, and the lease reports the loss
// (Lost, Err); a re-entry never takes a free lock. A Mutex ownership
// re-entered so, by a Mutex, Group or Quorum acquisition,
// is no longer passed on locally (WithLocalPasses): its Unlocks go to
// Redis.
//
// Once the lease has ended (Unlock, a reported loss, or the lock passed on
// locally) its context re-enters nothing: an acquisition with it, or with
// a context derived from it by context.WithoutCancel, is a new one under
// an owner id of its own, as if the context carried no lease.
func (l *Lease) Context() context.Context {
	if l == nil {
		return failedLease(ErrNotHeld).Context()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claim()
	if l.ctx == nil {
		parent := l.parent
		if parent == nil {
			parent = context.Background()
		}
		ctx := context.WithoutCancel(parent)
		if l.h != nil {
			ctx = context.WithValue(ctx, ctxKey{l.h.c, l.h.keys.lock}, l)
		} else if l.cause == nil {
			l.cause = ErrNotHeld // a Lease no lock made
		}
		l.ctx, l.cancel = context.WithCancelCause(ctx)
		l.parent = nil
		if l.cause != nil {
			l.cancel(l.cause)
		}
	}
	return l.ctx
}

// Token returns the lease's fencing token: it is the same for every
// re-entry of one ownership and strictly greater than the token of every
// earlier ownership of the lock's name, also when that one expired or was
// force-unlocked. Pass it to the resources the lock protects and have them
// reject writes that carry an older token. It is 0 for a failed acquisition.
func (l *Lease) Token() uint64 {
	if l == nil || l.h == nil {
		return 0
	}
	l.mu.Lock()
	l.claim()
	l.mu.Unlock()
	return l.ownToken()
}

// ownToken is the lease's fencing token, without claiming it: a lease
// passed on locally has its own, above its holder's (the ownership's token
// in Redis).
func (l *Lease) ownToken() uint64 {
	if l.token != 0 {
		return l.token
	}
	return l.h.token
}

// Deadline returns when the lease will be reported lost unless the
// watchdog renews it first: for a fixed lease, when it runs out (ErrExpired);
// for a watchdog lease, a moment that every renewal moves forward, so it is
// far off while Redis answers. It is the holder's view and errs early: it
// runs from when the command that set the key's expiry was sent, less a
// tenth of the lease, so Redis expires the key a tenth of the lease later at
// the earliest (Inspect reads the server's TTL). For the Lease of a Group
// or a Quorum, it is when fewer of its locks than it needs would still be
// held: for a Group, the earliest deadline of its locks. ok is false when
// the lease does not hold its lock.
func (l *Lease) Deadline() (deadline time.Time, ok bool) {
	if l.Err() != nil {
		return time.Time{}, false
	}
	if l.h.kind.deadline == nil {
		l.h.mu.Lock()
		done := l.h.done
		l.h.mu.Unlock()
		if done {
			return time.Time{}, false
		}
	}
	return l.h.vouchedUntil(), true
}

// vouchedUntil is when the Client stops vouching for h's hold unless a
// renewal succeeds first: its deadline (see Lease.Deadline).
func (h *holder) vouchedUntil() time.Time {
	if f := h.kind.deadline; f != nil {
		return f()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline()
}

// Detach leaves the lease's hold of the lock to expire in Redis instead of
// releasing it: the lease ends (Err and context.Cause of Context report
// ErrDetached; Lost stays open), and, once no other lease of the same
// ownership (re-entries) is live, the Client stops renewing and checking the
// lock and does not release it on Close. A fixed lease then runs its
// course, which is what one run per time slot needs (lock the slot, detach,
// exit); a watchdog lease expires within the watchdog lease. It returns
// ErrNotHeld when the lease does not hold its lock, and ErrInvalidArgument
// for the lease of a Group or Quorum, whose locks are released together.
func (l *Lease) Detach() error {
	if err := l.Err(); err != nil {
		if errors.Is(err, ErrNotHeld) {
			return err
		}
		return errorf("%w: %w", ErrNotHeld, err)
	}
	h := l.h
	if h.kind.spansClients {
		return fmt.Errorf("%w: a lease over several locks cannot be detached", ErrInvalidArgument)
	}
	l.mu.Lock()
	l.detached = true
	l.mu.Unlock()
	if co := l.co; co != nil {
		co.detach(l)
	}
	// Once no other lease of the ownership is live (now, or when the last
	// re-entry ends: see end), the Client stops renewing the lock.
	h.mu.Lock()
	h.detached = true
	h.mu.Unlock()
	l.end(ErrDetached)
	return nil
}

// Name returns the name of the lock the lease is for ("" for a failed
// acquisition).
func (l *Lease) Name() string {
	if l == nil || l.h == nil {
		return ""
	}
	return l.h.name
}

// abandon releases a lease that its acquirer will not get, because ctx
// ended as it was granted. The lease reports err. It does nothing to a
// lease already released or failed.
func (l *Lease) abandon(err error) { l.giveBack(err, false) }

// abandonAfter abandons l, a lease granted as its acquirer gave up (err:
// ctx's error, or ErrClosed), in the background (cleanup): the acquirer
// returns within the grace of its call, whatever Redis does meanwhile. l
// may be a lease of no lock (a Latch's wait), without a holder: the
// Client is the acquirer's.
func (c *Client) abandonAfter(ctx context.Context, l *Lease, err error) {
	c.cleanup(ctx, func(context.Context) { l.abandon(err) })
}

// reclaim abandons a lease Acquire offered, if nobody claimed it: its ctx
// ended first.
func (l *Lease) reclaim(err error) { l.giveBack(err, true) }

func (l *Lease) giveBack(err error, onlyOffered bool) {
	l.mu.Lock()
	skip := l.released || l.failed != nil || (onlyOffered && !l.offered)
	if !skip {
		// Failed in the same step as no longer offered: a receiver
		// claiming it from now on finds it failed.
		l.offered, l.failed = false, err
	}
	l.mu.Unlock()
	if skip {
		return
	}
	h := l.h
	if co := l.co; co != nil {
		st, ended, _ := co.settle(context.Background(), l, false)
		switch st {
		case unlockGone:
			return
		case unlockPassed:
			l.fail(err)
			co.drop()
			return
		}
		defer ended()
	}
	ctx, cancel := detached(context.Background())
	defer cancel()
	h.beginRelease()
	defer h.endRelease()
	// Failed first: a late receiver never sees a lease whose hold is
	// already given back report itself held.
	l.fail(err)
	st, rerr := h.kind.unlock(ctx, h, l.hold)
	switch {
	case st == freed:
		h.finish()
	case rerr != nil:
		h.c.log.Warn("redisync: release of an abandoned lease failed; it expires with its lease", "key", h.key, "err", rerr)
		h.mu.Lock()
		orphan := len(h.leases) == 0
		h.mu.Unlock()
		if orphan {
			h.lose(err) // stop renewing it
		}
	}
}

// releaseState is what a release found.
type releaseState int

const (
	notHeld   releaseState = iota // the owner did not hold the lock
	freed                         // the lock is free now
	stillHeld                     // the owner still holds it through other holds
)

// release runs the release script for one hold ("" for every hold) of an
// owner.
func (c *Client) release(ctx context.Context, keys lockKeys, owner, hold string) (releaseState, error) {
	e := c.releaseExec(keys, owner, hold)
	return c.runRelease(ctx, releaseScript, "release", e.Keys, e.Args)
}

// releaseExec is the release script's call for one hold ("" for every
// hold) of an owner of a Mutex or FairMutex.
func (c *Client) releaseExec(keys lockKeys, owner, hold string) rueidis.LuaExec {
	return rueidis.LuaExec{
		Keys: []string{keys.lock, keys.queue, keys.waiters},
		Args: []string{owner, hold, c.cfg.retentionArg, keys.channel},
	}
}
