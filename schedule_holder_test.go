package redisync

import (
	"errors"
	"strings"
)

// The check of TestSchedule on what a wait that its context ended says:
// a Mutex or FairMutex wait names the holder its last attempt read.

// Counted in world.attempts: the waits in a queue in Redis whose context
// ended while the lock was taken, by whether their error named a holder.
const (
	waitEndedNamed   = "queued wait ended, holder named"
	waitEndedUnnamed = "queued wait ended, no holder named"
)

// waitEnded counts the error err of a Lock of t that its context ended
// while the lock was taken, when t is a FairMutex or a Mutex that is not
// passed on locally: such a wait waited in the lock's queue in Redis, and
// its error names the holder its last attempt read, when that attempt
// found one (checkHoldersNamed).
func (w *world) waitEnded(t *target, form string, err error) {
	queued := t.prim == "fair" || t.prim == "mutex" && !t.mutex.passesLocally()
	if form != "Lock" || !queued || !errors.Is(err, ErrLocked) {
		return
	}
	if strings.Contains(err.Error(), "(held by ") {
		w.count(w.attempts, waitEndedNamed)
	} else {
		w.count(w.attempts, waitEndedUnnamed)
	}
}

// checkHoldersNamed is a violation when many queued waits ended while
// their lock was taken and none of them named its holder: some of them
// may end before an attempt read it (their context ended first, or the
// lock was free behind a queue), but not all.
func (w *world) checkHoldersNamed() {
	w.vmu.Lock()
	named, unnamed := w.attempts[waitEndedNamed], w.attempts[waitEndedUnnamed]
	w.vmu.Unlock()
	if named == 0 && unnamed >= 10 {
		w.violation("wait-ended-unnamed", "%d Mutex and FairMutex waits in a queue ended while their lock was taken, and none named the holder its last attempt read", unnamed)
	}
}
