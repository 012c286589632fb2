package redisync

import (
	"slices"
	"sync"
	"time"
)

// The operation of TestSchedule that checks that an invalidation of a
// lock's key voids the block of tokens a Client reserved for its local
// passes: the Client heard the lock changed, so it no longer vouches for
// the hold its block came with, even before it learns the hold is gone.

// invalidationInFlight, for a crowd of sc on t, a Mutex with local passes,
// on a Client whose replies can be held back: once a goroutine of the
// crowd holds the lock, the Client tracks its key and nothing of the
// Client's is about to change it (trackedHolder), it force-unlocks the
// lock from another Client and holds back the reply of the Client's next
// read of the key (the read that the invalidation brings on, and that
// would find the hold gone). Once that read ran, the invalidation came
// before its reply on the same connection: from then on, until the reply
// is let through, no goroutine of the crowd may get the lock passed on
// locally with a token of the block reserved before (a violation,
// "pass-after-invalidation"). It returns what ends the fault once the
// crowd is done.
func (w *world) invalidationInFlight(sc *schedClient, t *target) (end func()) {
	if sc.rf == nil || sc.inv == nil || t.mutex == nil || !sc.c.tracker.on {
		return func() {}
	}
	key := t.mutex.keys.lock
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		h, tried := w.trackedHolder(sc.c, key, done)
		if h == nil {
			return
		}
		faultEnded := w.faultBegins("hold-reply", "hold-reply tracking read, forced", sc.i)
		defer faultEnded()
		// The tracker's read of the key (not the watchdog's look at who
		// forced it, which a renewal that finds it gone makes).
		field := h.trackField()
		r, open := sc.rf.gate(func(cmd []string) bool { return len(cmd) > 2 && cmd[0] == "HGET" && cmd[1] == key && cmd[2] == field }, 1, false)
		defer func() {
			sc.rf.drop(r)
			open()
		}()
		seen := sc.inv.of(key)
		w.forceFrom(sc, t)
		h.mu.Lock()
		renewed := !h.tried.Equal(tried)
		h.mu.Unlock()
		if renewed {
			// The Client's own renewal changed the key about when it was
			// forced: its invalidation, not the ForceUnlock's, may be what
			// the read follows, and the key may have been untracked when
			// it was forced.
			return
		}
		select {
		case <-r.Ran():
		case <-time.After(time.Second):
			return
		case <-done:
			return
		}
		// The invalidation's hook ran in the connection's reader before
		// the read's reply, which the wrapper now holds, when the read is
		// the one the ForceUnlock's invalidation brought on. Another read
		// of the key (one a change before the ForceUnlock brought on, or
		// answered from the cache) may come first: the Client is judged
		// once an invalidation of the key since the ForceUnlock was sent
		// is counted, after the Client's own hooks ran (invalidationLog).
		for patience := time.After(time.Second); sc.inv.of(key) == seen; {
			select {
			case <-time.After(time.Millisecond):
			case <-patience:
				return
			case <-done:
				return
			}
		}
		w.count(w.attempts, "mutex crowd whose lock was forced, the tracking read's reply held back")
		co := sc.c.knownCohort(key)
		if co == nil {
			return
		}
		co.mu.Lock()
		top, last := co.top, co.current
		co.mu.Unlock()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		until := time.After(500 * time.Millisecond)
		for {
			co.mu.Lock()
			cur := co.current
			co.mu.Unlock()
			if cur != last && cur != nil && cur.h == h && passedLocally(cur) && cur.token <= top {
				w.violation("pass-after-invalidation", "mutex %s of c%d: passed on locally with token %d, of a block (up to %d) reserved before the invalidation of its key, which came with a ForceUnlock at %s",
					t.res, sc.i, cur.token, top, w.rel(time.Now()))
				return
			}
			last = cur
			select {
			case <-tick.C:
			case <-until:
				return
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// trackedHolder waits, a second at most and until done, for the lock at
// key to be held for its cohort in c by a holder h whose key the Client's
// tracker has read since it last changed, so that a change now brings an
// invalidation, and which changes nothing in the key soon: its watchdog
// sent no renewal in the last 20 ms (when it did, at tried), and its block
// of tokens has tokens and time left, so that no keep is near. It returns
// h and tried, or nil.
func (w *world) trackedHolder(c *Client, key string, done <-chan struct{}) (*holder, time.Time) {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(time.Second)
	for {
		if h := cohortHolder(c, key); h != nil && trackedSinceChange(c.tracker, h) && blockAhead(c, key) {
			h.mu.Lock()
			tried := h.tried
			h.mu.Unlock()
			if time.Since(tried) > 20*time.Millisecond {
				return h, tried
			}
		}
		select {
		case <-tick.C:
		case <-giveUp:
			return nil, time.Time{}
		case <-done:
			return nil, time.Time{}
		}
	}
}

// blockAhead reports whether the cohort of the lock at key in c has a
// block of tokens with 8 tokens and half a second left, or more.
func blockAhead(c *Client, key string) bool {
	co := c.knownCohort(key)
	if co == nil {
		return false
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.next+8 <= co.top && time.Until(co.until) > 500*time.Millisecond
}

// trackedSinceChange reports whether t tracks h's key, read since its
// last change: h is not waiting for its first read, and the key is not
// waiting to be read again.
func trackedSinceChange(t *tracker, h *holder) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.all || !slices.Contains(t.keys[h.key], h) {
		return false
	}
	if _, dirty := t.dirty[h.key]; dirty {
		return false
	}
	return !slices.ContainsFunc(t.pending, func(p pendingTrack) bool { return p.h == h })
}
