package redisync

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

const (
	// renewBatch is the most leases one renewal script covers.
	renewBatch = 100
	// renewRetry is the pause after a failed renewal pass, at most.
	renewRetry = time.Second
)

// watchdogIdle is how long the watchdog's loop sleeps with nothing to
// watch, unless a new holder brings its timer forward.
const watchdogIdle = time.Hour

// watchdog keeps the leases of one Client alive: one goroutine, whatever the
// number of leases. Every third of the watchdog lease it renews every
// watchdog lease and checks every fixed lease, in batched scripts grouped by
// cluster slot and sent in one pipeline. Leases shorter than the Client's
// (WithRenewedLease, and a lock handed over on a short first lease) get
// passes of their own in between, each a third into its lease. It reports
// a lease lost when Redis says it is gone or held by another owner, and
// when no renewal has succeeded by the time the lease could expire on the
// server.
type watchdog struct {
	c      *Client
	period time.Duration

	mu      sync.Mutex
	holders map[*holder]struct{}
	// lapsed holds the holders reported lost because no renewal answered
	// before their deadline (ErrConnectionLost), whose key may still hold
	// them, until their Unlock released them or the key must have expired:
	// Close, after which no Unlock is sent, releases what is left.
	lapsed map[*holder]time.Time
	// loop sleeps until the next deadline or renewal is due, an hour with
	// nothing to watch: a new holder brings its timer forward when it needs
	// it sooner (see add), and kicks it only while it is awake.
	loop

	logMu    sync.Mutex
	failures retryLog // renewal batches that failed
}

func newWatchdog(c *Client) *watchdog {
	return &watchdog{
		c:       c,
		period:  c.cfg.watchdogLease / 3,
		holders: make(map[*holder]struct{}),
		lapsed:  make(map[*holder]time.Time),
		loop:    newLoop(),

		failures: retryLog{log: c.log, msg: "redisync: lease renewal failed"},
	}
}

// add registers a holder. It is called before the acquisition returns, so a
// lease is never handed out unwatched.
func (w *watchdog) add(h *holder) {
	// The Client's passes renew every watchdog lease, and check every
	// fixed one, a third into it: a loop asleep with nothing to watch has
	// an old pass due by then. Not the deadline: by then it could only
	// report the lease lost.
	by := h.lastOK.Add(w.period)
	if at, _, ok := h.ownRenewal(w.c.cfg.watchdogLease); ok {
		// A short first lease gets the full one a third into it, as every
		// lease is renewed a third into it: a holder that unlocks sooner
		// costs no renewal.
		by = at
	}
	if d := h.deadline(); d.Before(by) {
		by = d
	}
	w.mu.Lock()
	w.holders[h] = struct{}{}
	// A sleeping loop is not woken: its timer is brought forward to when
	// the holder needs it, if it would sleep longer. Taking a lock, a
	// hand-over on its way to the waiter included, so costs no goroutine
	// wake-up; the loop, once its timer woke it, looks at every holder,
	// this one included.
	w.wakeBy(by, w.run)
	w.mu.Unlock()
	w.c.tracker.add(h)
}

// lookBy has the loop look at the holders by the given time, if it sleeps
// longer (a fixed lease made shorter by Extend).
func (w *watchdog) lookBy(by time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running && !w.sleepUntil.IsZero() && by.Before(w.sleepUntil) {
		w.startOrWake(w.run)
	}
}

// remove unregisters a holder: it is never renewed again.
func (w *watchdog) remove(h *holder) {
	w.mu.Lock()
	delete(w.holders, h)
	w.mu.Unlock()
	w.c.tracker.remove(h)
}

// close stops the loop, reports every live lease lost with ErrClosed and
// releases its lock in one pipelined batch, with the locks of the leases
// that lapsed and were not unlocked since (see lapse).
func (w *watchdog) close() {
	w.end(&w.mu)
	w.mu.Lock()
	hs := make([]*holder, 0, len(w.holders))
	for h := range w.holders {
		hs = append(hs, h)
	}
	lapsed := w.lapsed
	w.lapsed = make(map[*holder]time.Time)
	w.mu.Unlock()
	batches := make(map[*leaseKind][]rueidis.LuaExec)
	for _, h := range hs {
		if h.lose(ErrClosed) {
			batches[h.kind] = append(batches[h.kind], h.kind.releaseAll(h))
		}
	}
	for h := range lapsed {
		// The script frees the lock only while this ownership holds it. A
		// lease detached since is left to expire.
		h.mu.Lock()
		detached := h.detached
		h.mu.Unlock()
		if !detached {
			batches[h.kind] = append(batches[h.kind], h.kind.releaseAll(h))
		}
	}
	ctx, cancel := detached(context.Background())
	defer cancel()
	for kind, batch := range batches {
		for i, r := range kind.release.batch(ctx, w.c.rc, batch) {
			if err := r.Error(); err != nil {
				w.c.log.Error("redisync: release on close failed; it expires with its lease", "key", batch[i].Keys[0], "err", err)
			}
		}
	}
}

func (w *watchdog) run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	timer := time.NewTimer(w.period)
	defer timer.Stop()
	w.mu.Lock()
	w.useTimer(timer)
	w.mu.Unlock()
	defer func() {
		// Stopped: add no longer moves the timer.
		w.mu.Lock()
		w.awake()
		w.mu.Unlock()
	}()
	next := time.Now().Add(w.period)
	// A pass runs on its own goroutine, one at a time, so that deadlines are
	// enforced on time even when Redis does not answer (a connection to a
	// hung server can block longer than the pass's context).
	type result struct{ ok, short bool }
	passed := make(chan result, 1)
	inflight := false
	for {
		w.mu.Lock()
		w.awake() // a new holder kicks
		w.mu.Unlock()
		now := time.Now()
		wait, any, ownAt := w.expire(now)
		if any && !inflight {
			due := !now.Before(next)
			// Holders on leases shorter than the Client's are renewed in
			// passes of their own, unless a full one is due.
			ownDue := !ownAt.IsZero() && !now.Before(ownAt)
			if ownDue || due {
				short := !due
				inflight = true
				go func() { passed <- result{w.pass(ctx, now, short), short} }()
			}
		}
		w.mu.Lock()
		if any && !inflight {
			wait = min(wait, next.Sub(now))
			if !ownAt.IsZero() {
				wait = min(wait, ownAt.Sub(now))
			}
		}
		if !any {
			wait = watchdogIdle
		}
		w.sleepFor(max(wait, time.Millisecond))
		w.mu.Unlock()
		select {
		case <-w.stop:
			if inflight {
				cancel()
				<-passed
			}
			return
		case <-w.kick:
		case <-timer.C:
		case r := <-passed:
			inflight = false
			switch {
			case r.short:
				// A holder the pass did not renew is retried on its own
				// schedule (ownRenewal).
			case r.ok:
				next = time.Now().Add(w.period)
			default:
				next = time.Now().Add(jitter(min(w.period, renewRetry)))
			}
		}
	}
}

// expire reports lost the leases whose deadline has passed, and returns the
// time until the next deadline (any is false when nothing is watched) and
// the earliest time a holder needs a renewal pass of its own (zero when
// none does; see ownRenewal).
func (w *watchdog) expire(now time.Time) (wait time.Duration, any bool, ownAt time.Time) {
	w.mu.Lock()
	for h, until := range w.lapsed {
		if now.After(until) {
			delete(w.lapsed, h)
		}
	}
	var late []*holder
	wait = time.Duration(1<<63 - 1)
	for h := range w.holders {
		h.mu.Lock()
		d := h.deadline()
		at, _, own := h.ownRenewal(w.c.cfg.watchdogLease)
		h.mu.Unlock()
		if !now.Before(d) {
			late = append(late, h)
			continue
		}
		any = true
		wait = min(wait, d.Sub(now))
		if own && (ownAt.IsZero() || at.Before(ownAt)) {
			ownAt = at
		}
	}
	w.mu.Unlock()
	for _, h := range late {
		if h.watchdog {
			if h.lose(ErrConnectionLost) {
				w.lapse(h, now)
			}
		} else {
			h.runOut()
		}
	}
	return wait, any, ownAt
}

// lapse keeps h, reported lost at now because no renewal answered before
// its deadline, for Close to release: its key may still hold it, for its
// last renewals may have run (and a lease reported lost at its deadline has
// a tenth of it left in Redis anyway). Its Unlock releases it (see
// Lease.Unlock), but none is sent once the Client is closed. A renewal sent
// before the deadline sets the key's expiry a lease from when it runs;
// one held up on its way may run later still, which the Client cannot
// know: h is forgotten once cleanupTimeout more than a lease passed, and a
// key a renewal kept longer than that expires with it. An ownership that
// an Unlock already found unheld is not kept (one with a detached lease is
// skipped by close, which it may be detached before).
func (w *watchdog) lapse(h *holder, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h.mu.Lock()
	unheld := h.unheld
	h.mu.Unlock()
	if !unheld {
		w.lapsed[h] = now.Add(h.lease + cleanupTimeout)
	}
}

// released forgets a lapsed holder (see lapse) whose Unlock found it no
// longer holding its lock in Redis: released, or gone.
func (w *watchdog) released(h *holder) {
	w.mu.Lock()
	delete(w.lapsed, h)
	w.mu.Unlock()
}

// ownRenewal tells when h needs a renewal pass of its own, between the
// Client's passes (every third of its watchdog lease, clientLease), and
// the period of h's renewals: a third of a lease shorter than the
// Client's (WithRenewedLease), of a short first lease (a lock handed
// over), or of the expiry other holders of a shared key set it to, when
// that is shorter (see holder.shared). After a pass that did not renew h, it is tried again after its
// period or renewRetry, whichever is shorter. ok is false for a holder the
// Client's passes serve. Call it with h.mu held.
func (h *holder) ownRenewal(clientLease time.Duration) (at time.Time, period time.Duration, ok bool) {
	switch {
	case !h.watchdog:
		return time.Time{}, 0, false
	case h.initial > 0:
		period = h.initial / 3
	case h.lease < clientLease:
		period = h.lease / 3
	}
	if s := h.sharedLease(); s > 0 {
		// Other holders of the key set it to expire as soon as s after
		// h's renewal: renewed a third into that, it never expires under
		// h while h lives, whoever of them dies (never later than a third
		// of h's own lease, nor sooner than minSharedRenewal).
		if sp := min(s/3, h.lease/3); period == 0 || sp < period {
			period = sp
		}
	}
	if period == 0 {
		return time.Time{}, 0, false
	}
	at = h.lastOK.Add(period)
	if h.tried.After(h.lastOK) {
		if retry := h.tried.Add(min(period, renewRetry)); retry.After(at) {
			at = retry
		}
	}
	return at, period, true
}

// pass renews or checks every watched lease once, or with short only the
// leases that need a pass of their own (see ownRenewal) by now or within a
// quarter of their period, so that leases due about together share a pass.
// It reports whether every batch got an answer from Redis.
func (w *watchdog) pass(ctx context.Context, start time.Time, short bool) bool {
	w.mu.Lock()
	hs := make([]*holder, 0, len(w.holders))
	soonest := time.Duration(1<<63 - 1)
	for h := range w.holders {
		h.mu.Lock()
		skip := false
		if short {
			at, period, own := h.ownRenewal(w.c.cfg.watchdogLease)
			skip = !own || at.After(start.Add(period/4))
		}
		if !skip {
			soonest = min(soonest, h.deadline().Sub(start))
			if h.watchdog {
				h.tried = start
			}
		}
		h.mu.Unlock()
		if !skip {
			hs = append(hs, h)
		}
	}
	w.mu.Unlock()
	// A pass never outlives the first deadline, so that loss is reported on
	// time even when Redis does not answer.
	ctx, cancel := context.WithTimeout(ctx, max(min(w.period, soonest), 10*time.Millisecond))
	defer cancel()
	ok := true
	for kind, slots := range w.bySlot(hs) {
		if _, unanswered := w.renew(ctx, kind, slots, start, false); len(unanswered) > 0 {
			ok = false
		}
	}
	if ok {
		w.logMu.Lock()
		w.failures.succeeded()
		w.logMu.Unlock()
	}
	return ok
}

// check asks Redis whether each holder still holds its lock, renewing
// nothing, and applies the answers as a pass does: a lock gone or taken is
// a loss. It returns the holders found holding their lock, and those Redis
// did not answer for.
func (w *watchdog) check(ctx context.Context, hs []*holder) (held, unanswered []*holder) {
	start := time.Now()
	for kind, slots := range w.bySlot(hs) {
		h, u := w.renew(ctx, kind, slots, start, true)
		held = append(held, h...)
		unanswered = append(unanswered, u...)
	}
	return held, unanswered
}

// bySlot groups holders by kind and cluster slot, as renewal scripts take
// them.
func (w *watchdog) bySlot(hs []*holder) map[*leaseKind]map[uint16][]*holder {
	kinds := make(map[*leaseKind]map[uint16][]*holder)
	for _, h := range hs {
		var slot uint16
		if w.c.cluster {
			slot = slotHash(h.key)
		}
		if kinds[h.kind] == nil {
			kinds[h.kind] = make(map[uint16][]*holder)
		}
		kinds[h.kind][slot] = append(kinds[h.kind][slot], h)
	}
	return kinds
}

// renew renews (or with check, only checks) the holders of one kind, in one
// script run per slot and per renewBatch holders, all sent in one pipeline.
// It returns the holders that hold their lock and those Redis did not
// answer for.
func (w *watchdog) renew(ctx context.Context, kind *leaseKind, slots map[uint16][]*holder, start time.Time, check bool) (held, unanswered []*holder) {
	var batch []rueidis.LuaExec
	var members [][]*holder
	for _, hs := range slots {
		// The holders were gathered when the pass began, and the batches
		// of the kinds before this one were answered since (a reply held
		// back takes up to the pass's timeout): a holder whose loss was
		// reported meanwhile is left out, so that the Client never renews
		// a lease it reported lost, nor asks about it. Its end is final,
		// so the batch is built from what is true now, just before it is
		// sent. (bySlot made hs for this pass alone.)
		hs = slices.DeleteFunc(hs, (*holder).ended)
		for len(hs) > 0 {
			n := min(len(hs), renewBatch)
			chunk := hs[:n]
			hs = hs[n:]
			e := rueidis.LuaExec{Keys: make([]string, n), Args: make([]string, 0, 2*n)}
			for i, h := range chunk {
				e.Keys[i] = h.key
				lease := "0"
				if h.watchdog && !check {
					lease = strconv.FormatInt(h.lease.Milliseconds(), 10)
				}
				e.Args = append(e.Args, h.owner, lease)
			}
			batch = append(batch, e)
			members = append(members, chunk)
		}
	}
	for i, r := range kind.renew.batch(ctx, w.c.rc, batch) {
		states, err := r.AsIntSlice()
		if f := w.c.cfg.metrics.Renewed; f != nil && !check {
			f(len(members[i]), err)
		}
		if err != nil || len(states) != len(members[i]) {
			unanswered = append(unanswered, members[i]...)
			if !check {
				w.logMu.Lock()
				w.failures.failed("keys", len(members[i]), "err", err)
				w.logMu.Unlock()
			}
			continue
		}
		for j, h := range members[i] {
			if w.settle(ctx, h, states[j], start, check) {
				held = append(held, h)
			}
		}
	}
	return held, unanswered
}

// ended reports whether h's ownership ended: lost, or released for good.
func (h *holder) ended() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done
}

// settle applies one renewal (or check) answer to a holder, and reports
// whether the holder holds its lock.
func (w *watchdog) settle(ctx context.Context, h *holder, state int64, sent time.Time, check bool) bool {
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		return false
	}
	if renewedHeld(state) {
		if h.watchdog && !check {
			h.lastOK = sent
			h.initial = 0
			// Held, and other holders had set the shared key to expire
			// sooner than h's lease: h is renewed at a third of the
			// shortest such expiry from now on (ownRenewal), whatever
			// its lease says.
			h.shared = narrower(h.shared, sharedExpiry(state))
		}
		h.mu.Unlock()
		return true
	}
	// A release in flight explains a missing key; the next pass looks
	// again. One whose answer never came does not: the lock may have
	// moved on since, and is reported as any other loss (a retried Unlock
	// still reports the release that landed, see Lease.Unlock).
	releasing := h.releasing > 0
	h.mu.Unlock()
	if releasing {
		return false
	}
	switch {
	case w.forced(ctx, h):
		h.lose(ErrForceUnlocked)
	case state == 0:
		h.lose(ErrExpired)
	default:
		h.lose(ErrTakenOver)
	}
	return false
}

// forced reports whether a lock found free was force-unlocked while h held
// it (see leaseKind.forceMarked).
func (w *watchdog) forced(ctx context.Context, h *holder) bool {
	if !h.kind.forceMarked {
		return false
	}
	owner, err := w.c.rc.Do(ctx, w.c.rc.B().Hget().Key(h.keys.lock).Field("f").Build()).ToString()
	return err == nil && owner == h.owner
}

// slotHash is the Redis Cluster slot of a key: CRC16 (XMODEM) of its hash
// tag, or of the whole key when it has none, modulo 16384.
func slotHash(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc & 16383
}
