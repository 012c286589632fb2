package redisync

import (
	"context"
	"slices"
	"strconv"
	"time"
)

// The operation and checks of TestSchedule on a lease's Deadline around
// an Extend.

// extend extends l, a fixed lease of Client sc, by d. On a Client whose
// replies can be held back, the Extend's reply is held back once its
// script ran, and meanwhile the lease's Deadline must be no later than d
// from then: an Extend shorter than what is left brings the end that close
// as soon as it is sent, reply or not (the script may run, and the lock
// end d after it ran). After it returned, whatever it returned, the same
// holds (extended).
func (w *world) extend(ctx context.Context, sc *schedClient, t *target, l *Lease, d time.Duration) error {
	if sc.rf == nil {
		return l.Extend(ctx, d)
	}
	_, err := extendHeld(ctx, sc.rf, l, d, func() { w.extended(t, l, sc.i, d, nil, "while its reply is held back") })
	return err
}

// extendAtEnd extends l, a fixed lease of Client sc, by d just before its
// end, with its reply held back until the lease ran out (3s at most): the
// script ran, and gave the lock an end d later that no lease holds. The
// lease's Client releases the lock when the lease runs out; its caller
// then often leaves the lease to expire, which checks that the key does
// not outlive it (leaveToExpire).
func (w *world) extendAtEnd(sc *schedClient, l *Lease, d time.Duration) error {
	if dl, ok := l.Deadline(); ok {
		time.Sleep(time.Until(dl) - 20*time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := extendHeld(ctx, sc.rf, l, d, func() { untilLost(l, 3*time.Second) })
	return err
}

// extendHeld extends l by d on a Client whose replies rf holds back: once
// the Extend's script ran, held is called while its reply is held back,
// and then the reply comes. It returns whether the script ran before
// Extend returned, and what Extend returned.
func extendHeld(ctx context.Context, rf *replyFaults, l *Lease, d time.Duration, held func()) (bool, error) {
	renews := []func([]string) bool{runs(renewScript), runs(rwRenewScript), runs(semRenewScript)}
	owner, ms := l.h.owner, strconv.FormatInt(d.Milliseconds(), 10)
	r, open := rf.gate(func(cmd []string) bool {
		args := scriptArgs(cmd)
		return slices.ContainsFunc(renews, func(m func([]string) bool) bool { return m(cmd) }) &&
			len(args) == 2 && args[0] == owner && args[1] == ms
	}, 1, false)
	defer rf.drop(r)
	errs := make(chan error, 1)
	go func() { errs <- l.Extend(ctx, d) }()
	select {
	case <-r.Ran():
		held()
		open()
		return true, <-errs
	case err := <-errs:
		open()
		return false, err
	}
}

// untilLost waits until l is lost, at most within.
func untilLost(l *Lease, within time.Duration) {
	select {
	case <-l.Lost():
	case <-time.After(within):
	}
}

// extended checks the lease l of t, of Client c, after its Extend by d
// was sent (when says how far it went; err is what it returned, if it
// did): its Deadline is no later than d from now.
func (w *world) extended(t *target, l *Lease, c int, d time.Duration, err error, when string) {
	now := time.Now()
	if dl, ok := l.Deadline(); ok && dl.After(now.Add(d)) {
		w.violation("deadline-after-extend", "%s %v of c%d: Deadline %s after an Extend by %v, %s at %s (%v): later than the lock may end",
			t.prim, t.res, c, w.rel(dl), d, when, w.rel(now), err)
	}
}
