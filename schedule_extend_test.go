package redisync

import "time"

// The check of TestSchedule on a lease's Deadline after an Extend.

// extended checks the lease l of t, of Client c, just after its Extend by
// d returned err: whatever the outcome, its Deadline is no later than d
// from now. An Extend shorter than what was left brings the end that
// close as soon as it is sent, reply or not (the script may run, and the
// lock end d after it ran); a longer one moves it, from when it was sent,
// only once its reply says the lock was extended.
func (w *world) extended(t *target, l *Lease, c int, d time.Duration, err error) {
	returned := time.Now()
	if dl, ok := l.Deadline(); ok && dl.After(returned.Add(d)) {
		w.violation("deadline-after-extend", "%s %v of c%d: Deadline %s after an Extend by %v that returned at %s (%v): later than the lock may end",
			t.prim, t.res, c, w.rel(dl), d, w.rel(returned), err)
	}
}
