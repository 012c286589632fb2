package redisync

import "sync"

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
