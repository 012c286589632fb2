package redisync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Extend gives a fixed lease (WithFixedLease) d more from now: the lock
// then expires d after Extend was sent, unless released first, and the
// lease reports ErrExpired a tenth of d before that (Deadline moves with
// it). d may be shorter than what is left, which brings the end closer, as
// bsm/redislock's Refresh does. Every lease of the same ownership (its
// re-entries) shares the new end.
//
// The lock's owner is checked and its expiry set in one script on the
// server, so Extend never extends a lock its lease no longer holds. When
// the lock is gone or held by another owner, the lease is reported lost
// with the reason (ErrExpired, ErrForceUnlocked, ErrTakenOver) and Extend
// returns ErrNotHeld wrapping it; a lease that had already ended returns
// ErrNotHeld with its reason, without a round trip. A lease whose time ran
// out while its Extend was on its way is reported expired even if the
// script extended the key, and Extend returns ErrNotHeld; so is a lease
// that runs out after an Extend whose reply never came. Either Extend may
// have given the lock an end in Redis that no lease holds: the Client
// releases the lock (every hold of the ownership) when the lease runs out,
// so that it is not left held for nobody until that end.
//
// A lease the watchdog renews (the Client's lease or WithRenewedLease)
// needs no extension: Extend returns ErrInvalidArgument, as it does for a
// Group or Quorum lease, a nil ctx and a d under a millisecond. An error
// from Redis or ctx is returned as is: Extend may be retried. A d shorter
// than what is left brings Deadline, and the lease's expiry, that close as
// soon as Extend is called, error or not: the script may run, and the lock
// end that soon, whether or not its reply comes back. A longer d moves them
// only once the reply says the lock was extended, and not past the end an
// Extend called after it set.
func (l *Lease) Extend(ctx context.Context, d time.Duration) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	case d < time.Millisecond:
		return fmt.Errorf("%w: extension %v is under a millisecond", ErrInvalidArgument, d)
	}
	if err := l.Err(); err != nil {
		if errors.Is(err, ErrNotHeld) {
			return err
		}
		return errorf("%w: %w", ErrNotHeld, err)
	}
	h := l.h
	switch {
	case h.kind.spansClients:
		return fmt.Errorf("%w: a lease over several locks cannot be extended", ErrInvalidArgument)
	case h.watchdog:
		return fmt.Errorf("%w: the watchdog renews this lease; Extend is for a fixed lease (WithFixedLease)", ErrInvalidArgument)
	}
	sent := time.Now()
	// From the moment the script may run, the lock may end d after it
	// runs, so d after sent at the soonest: sooner than the lease's end
	// when d is shorter than what is left. The lease takes the sooner end
	// now, whatever becomes of the reply; never the later one, which only
	// the reply can vouch for.
	if !h.extendFrom(sent, d, true) {
		// Ended since Err was read: a lease whose end was reported is
		// never renewed, so no script is sent.
		return h.notHeldErr()
	}
	// The renewal script of the lock's kind: it sets the expiry of what
	// the owner holds, and only if it still holds it.
	states, err := h.kind.renew.exec(ctx, h.c.rc, []string{h.key}, []string{h.owner, strconv.FormatInt(d.Milliseconds(), 10)}).AsIntSlice()
	switch {
	case err != nil:
		// The script may have run, its reply lost or come too late: the
		// lease keeps the sooner end it took when the call was sent, and
		// the Extend stays unsure (runOut releases what it may have
		// extended).
		return redisErr("extend", err)
	case len(states) != 1:
		return errors.New("redisync: extend: unexpected reply")
	case renewedHeld(states[0]):
		// Settled only if the lease takes the new end: one that ran out
		// meanwhile was released at its end, after this script ran.
		if h.extendFrom(sent, d, false) {
			h.settleExtend()
			return nil
		}
	default:
		h.settleExtend()
		h.c.watchdog.settle(ctx, h, states[0], sent, true)
	}
	return h.notHeldErr()
}

// settleExtend notes that an Extend's reply told what it did (see
// unsureExtends).
func (h *holder) settleExtend() {
	h.mu.Lock()
	h.unsureExtends--
	h.mu.Unlock()
}

// notHeldErr is Extend's error for h once it ended: ErrNotHeld with the
// reason of its loss.
func (h *holder) notHeldErr() error {
	h.mu.Lock()
	reason := h.err
	h.mu.Unlock()
	if reason == nil {
		return fmt.Errorf("%w: released while it was extended", ErrNotHeld)
	}
	return errorf("%w: %w", ErrNotHeld, reason)
}

// extendFrom gives h, unless it ended, the fixed lease d counted from sent,
// the moment an Extend's script was sent: when sooner, only if that ends
// the lease sooner than it ends now (the script may run from sent on);
// otherwise (the script's reply said it ran) unless an Extend sent later
// set the lease's end already, which Redis also ran later. It reports
// whether h is still held.
func (h *holder) extendFrom(sent time.Time, d time.Duration, sooner bool) bool {
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		return false
	}
	if sooner {
		h.unsureExtends++ // until its reply settles it
	}
	if sooner && !sent.Add(d-d/10).Before(h.deadline()) || !sooner && h.lastOK.After(sent) {
		h.mu.Unlock()
		return true
	}
	h.lastOK, h.extended = sent, d
	by := h.deadline()
	h.mu.Unlock()
	h.c.watchdog.lookBy(by)
	return true
}
