package redisync

import (
	"sync"
	"time"
)

// loop is a background goroutine of a Client that runs only once there is
// work for it: the watchdog's renewals, the tracker's reads, the waiters'
// presence. The first start runs it, later ones wake it; end stops it for
// good. Its owner guards running with its own mutex, so that deciding to
// start and recording the work are one step.
type loop struct {
	running bool          // started, or ended: no loop starts again
	kick    chan struct{} // wakes the loop to look at new work
	stop    chan struct{} // closed by end
	done    chan struct{} // closed when the goroutine returns

	// sleepUntil is when the loop's timer wakes it while it sleeps (see
	// sleepFor); zero while it is awake, when it may have looked at its
	// work already, and once it stopped. timer is the loop's, set
	// (useTimer) before it first sleeps. Both are guarded by the owner's
	// mutex.
	sleepUntil time.Time
	timer      *time.Timer
}

func newLoop() loop {
	return loop{kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// startOrWake runs run on a goroutine the first time, and wakes the
// running loop afterwards. Call it with the owner's mutex held.
func (l *loop) startOrWake(run func()) {
	if !l.running {
		l.running = true
		go func() {
			defer close(l.done)
			run()
		}()
		return
	}
	l.wake()
}

// wakeBy has the loop look at new work by at: it starts it the first
// time, and kicks it while it is awake. A loop that sleeps past at has its
// timer brought forward to at instead, and one that wakes sooner is left
// alone: work added on the hot path (a lock taken or handed over, a waiter
// queued) costs no goroutine wake-up unless it is due before the loop
// looks anyway. This is as good as a kick: the loop, once its timer woke
// it, looks at all its work, the new one included, which the caller
// recorded under the owner's mutex before. Call it with that mutex held.
func (l *loop) wakeBy(at time.Time, run func()) {
	if !l.running || l.sleepUntil.IsZero() {
		l.startOrWake(run)
		return
	}
	if at.Before(l.sleepUntil) {
		l.sleepUntil = at
		l.timer.Reset(max(time.Until(at), 0))
	}
}

// useTimer makes timer the loop's, for wakeBy to bring forward. Call it
// with the owner's mutex held, from the loop's goroutine, before it first
// sleeps.
func (l *loop) useTimer(timer *time.Timer) { l.timer = timer }

// sleepFor arms the loop's timer for d before the loop waits, and records
// when it wakes: from now on wakeBy brings the timer forward rather than
// kicking. Call it with the owner's mutex held.
func (l *loop) sleepFor(d time.Duration) {
	l.timer.Reset(d)
	l.sleepUntil = time.Now().Add(d)
}

// awake records that the loop runs: work added from now on kicks it.
// Call it with the owner's mutex held, at the start of each round, and
// when the loop returns.
func (l *loop) awake() { l.sleepUntil = time.Time{} }

// wake wakes the loop unless a wake-up is pending already.
func (l *loop) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// end stops the loop for good and waits for it to return. mu is the
// owner's mutex, not held by the caller.
func (l *loop) end(mu *sync.Mutex) {
	mu.Lock()
	started := l.running
	l.running = true
	mu.Unlock()
	close(l.stop)
	if started {
		<-l.done
	}
}
