package redisync

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The operations of TestSchedule that reach a lease's end from the side:
// a holder that overruns its fixed lease, a Client whose watchdog lapses
// over a lease's deadline, an Unlock whose first reply is lost and that is
// retried, and a ForceUnlock from another Client while a call's reply (a
// crowd's keep's, among others) is on its way. What they reach is checked
// by the lock model, where an Unlock that returns nil says that its lease
// held until that Unlock was called, so that an ownership delivered to
// another Client before the call overlaps it; and by unlockedAfterLoss,
// which states that promise on its own.

// overstay returns how long to hold a lease of t: hold, or, for a fixed
// lease of at most 2s, past its deadline, one time in ten (one in three
// for a Group's, which are fewer): its holder overruns it, and its Unlock
// comes after its loss, perhaps after another owner took the lock (a
// Group's loss releases what it held at once).
func overstay(rnd *rand.Rand, t *target, hold time.Duration) time.Duration {
	n := 10
	if t.prim == "group" {
		n = 3
	}
	if !t.fixed || t.lease > 2*time.Second || rnd.IntN(n) != 0 {
		return hold
	}
	return t.lease + time.Duration(100+rnd.IntN(500))*time.Millisecond
}

// unlockAfterLostReply unlocks l, a Mutex or FairMutex lease of t held by
// sc, whose Client's replies can be lost: the first Unlock's release runs
// in Redis and its reply is lost, and the Unlock is retried. For a fixed
// lease due within a few seconds and not passed on locally, the
// Client lapses first (lapse). It returns the first Unlock's error if it
// is nil (no reply was lost), otherwise the retry's.
func (w *world) unlockAfterLostReply(sc *schedClient, t *target, l *Lease, life *leaseLife, ctx context.Context) error {
	resume, shows, seen := func() {}, "", time.Time{}
	if t.fixed && l.co == nil {
		resume, shows, seen = w.lapse(sc, t, l)
	}
	rule := sc.rf.lose(runsWith(releaseScript, l.h.owner), 1, 0)
	firstDone := make(chan error, 1)
	go func() { firstDone <- w.unlockLease(l, life, ctx) }()
	// The Client resumes once the release ran in Redis (sent while it
	// lapsed), or the Unlock returned without one, or after a second: an
	// Unlock that ends the hold waits for the watchdog, and one that finds
	// the lease past its Deadline ends it without sending a release.
	var first error
	returned := false
	select {
	case <-rule.Ran():
	case first = <-firstDone:
		returned = true
	case <-time.After(time.Second):
	}
	resume()
	if !returned {
		first = <-firstDone
	}
	sc.rf.drop(rule)
	w.count(w.attempts, t.prim+" unlock retried after its reply was lost")
	if first != nil {
		w.count(w.failures, t.prim+" unlock whose reply was lost: "+errClass(first))
	}
	err := w.unlockLease(l, life, ctx)
	if first == nil && err == nil {
		w.violation("unlock-twice-nil", "%s %v of c%d (token %d): an Unlock retried after it returned nil returned nil again at %s",
			t.prim, t.res, sc.i, l.Token(), w.rel(time.Now()))
	}
	if first == nil {
		return nil
	}
	w.unlockedAfterLoss(t, sc, l, shows, seen, err)
	return err
}

// notHeldNow returns what Redis shows of t's lock when it does not show
// l holding it, and when it was read ("" when it shows l holding it, or
// the read failed). Not on a primary with a replica, whose failover may
// take back what Redis showed.
func (w *world) notHeldNow(t *target, l *Lease) (string, time.Time) {
	if w.pair != nil {
		return "", time.Time{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	at := time.Now()
	shows, err := t.inspect(ctx, l)
	if err != nil {
		return "", time.Time{}
	}
	return shows, at
}

// unlockedAfterLoss checks an Unlock of l, whose lock Redis showed not
// held by l (shows) at seen, before the Unlock was called: the hold was
// gone by then (an ownership never comes back), so the Unlock must not
// report a release (nil). A restart, which may lose the writes that took
// the hold, excuses it.
func (w *world) unlockedAfterLoss(t *target, sc *schedClient, l *Lease, shows string, seen time.Time, err error) {
	if err != nil || shows == "" || w.faulted(-1, seen.Add(-2*time.Second), time.Now(), "restart") {
		return
	}
	w.violation("unlock-nil-after-loss", "%s %v of c%d (token %d): Unlock returned nil at %s, but before it was called Redis showed the lock not held by the lease at %s (%s); faults: %s",
		t.prim, t.res, sc.i, l.Token(), w.rel(time.Now()), w.rel(seen), shows, w.faultsAround(seen.Add(-5*time.Second), time.Now(), 0))
}

// lapse stalls sc's watchdog over the deadline of l, a fixed lease of t
// due within a few seconds, as a lapse of its Client would (a pause of
// its process): nothing reports the lease lost, while its key expires in
// Redis and, most of the time, another owner takes the lock. It returns,
// with the watchdog still stalled, once another owner holds the lock or a
// moment after the key expired, and the caller resumes it with the
// function it returns; shows is what Redis showed of the lock then, when
// not l holding it, read at seen (see notHeldNow). The stall is a fault
// of sc's Client: its calls that add or end a hold wait for it.
func (w *world) lapse(sc *schedClient, t *target, l *Lease) (resume func(), shows string, seen time.Time) {
	dl, ok := l.Deadline()
	if !ok || time.Until(dl) > 3*time.Second {
		return func() {}, "", time.Time{}
	}
	time.Sleep(time.Until(dl) - 10*time.Millisecond)
	faultEnded := w.faultBegins("stall-watchdog", "stall-watchdog", sc.i)
	unstall := sc.c.stallWatchdog()
	// The key expires a tenth of the lease after the Deadline; another
	// Client's waiter takes the lock soon after, if one waits.
	expiry := dl.Add(t.lease/9 + 20*time.Millisecond)
	time.Sleep(time.Until(expiry))
	taken := false
	for until := time.Now().Add(250 * time.Millisecond); time.Now().Before(until); time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		owner, err := t.owner(ctx)
		cancel()
		if err == nil && owner != "" && owner != l.h.owner {
			taken = true
			break
		}
	}
	shows, seen = w.notHeldNow(t, l)
	w.count(w.attempts, map[bool]string{true: "lapse over a deadline: another owner took the lock", false: "lapse over a deadline: nobody took the lock"}[taken])
	return func() {
		unstall()
		faultEnded()
	}, shows, seen
}

// stalled reports whether the watchdog of Client i lapsed (lapse) between
// from and to: its calls that add or end a hold waited for it.
func (w *world) stalled(i int, from, to time.Time) bool {
	return w.faulted(i, from, to, "stall-watchdog")
}

// forceInFlight force-unlocks, from another Client, the Mutex whose call
// (matched by match on sc) ran in Redis while its reply is held back or
// lost (rule r): the Client that made the call learns of the ForceUnlock
// before, or after, the reply. It returns match, wrapped to note the
// lock's key; run starts the ForceUnlock once the rule is made. The calls
// of a Mutex (acquire, release, keep, renew) name its lock's key first.
func (w *world) forceInFlight(sc *schedClient, match func([]string) bool, stop <-chan struct{}, wg *sync.WaitGroup) (wrapped func([]string) bool, run func(r *replyRule)) {
	var mu sync.Mutex
	var key string
	wrapped = func(cmd []string) bool {
		if !match(cmd) {
			return false
		}
		if len(cmd) > 3 {
			mu.Lock()
			if key == "" {
				key = cmd[3]
			}
			mu.Unlock()
		}
		return true
	}
	run = func(r *replyRule) {
		afterRan(r, stop, wg, func() {
			mu.Lock()
			k := key
			mu.Unlock()
			w.forceElsewhere(sc, k)
		})
	}
	return wrapped, run
}

// afterRan calls f on a goroutine of wg once a call rule r acted on ran
// in Redis, unless stop is closed first.
func afterRan(r *replyRule, stop <-chan struct{}, wg *sync.WaitGroup, f func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-r.Ran():
			f()
		case <-stop:
		}
	}()
}

// faultBegins records a fault of kind (counted as label) on Client i,
// from now until the returned function is called.
func (w *world) faultBegins(kind, label string, i int) (ended func()) {
	w.mu.Lock()
	n := len(w.faults)
	w.faults = append(w.faults, fault{kind: kind, client: i, start: time.Now(), end: time.Now().Add(time.Minute), label: label})
	w.mu.Unlock()
	w.vmu.Lock()
	w.faultCount[label]++
	w.vmu.Unlock()
	return func() {
		w.mu.Lock()
		w.faults[n].end = time.Now()
		w.mu.Unlock()
	}
}

// forceElsewhere force-unlocks the Mutex whose lock's key is key from a
// Client other than sc, and reports whether one of them has it.
func (w *world) forceElsewhere(sc *schedClient, key string) bool {
	w.mu.Lock()
	all, clients := w.schedTargets, w.schedClients
	w.mu.Unlock()
	for j, ts := range all {
		if j == sc.i {
			continue
		}
		if i := slices.IndexFunc(ts, func(t *target) bool { return t.mutex != nil && t.mutex.keys.lock == key }); i >= 0 {
			w.count(w.attempts, "force unlock while a reply is on its way")
			w.forceUnlock(ts[i], clients[j])
			return true
		}
	}
	return false
}

// keepInFlight, for a crowd of sc on t, a Mutex with local passes, on a
// Client whose replies can be held back: holds back the reply of the
// crowd's next keep (see cohort.keep), force-unlocks the lock from another
// Client once the keep ran, and lets the reply come once the lock's next
// acquisition by sc in Redis was delivered, as the cohort's new holder
// (or after a moment, at least patience): the keep's holder lost the lock while its keep was
// on its way, and a goroutine of the crowd took it in Redis, with a
// greater token and a block of its own, before the reply came. It returns
// what ends the fault once the crowd is done.
func (w *world) keepInFlight(rnd *rand.Rand, sc *schedClient, t *target, patience time.Duration) (end func()) {
	if sc.rf == nil || t.mutex == nil {
		return func() {}
	}
	isKeep, key := callMatcher("keep", w.liveOwner), t.mutex.keys.lock
	hold := max(time.Duration(50+rnd.IntN(1450))*time.Millisecond, patience)
	faultEnded := w.faultBegins("hold-reply", "hold-reply keep, forced while on its way", sc.i)
	r, open := sc.rf.gate(func(cmd []string) bool { return isKeep(cmd) && len(cmd) > 3 && cmd[3] == key }, 1, false)
	var once sync.Once
	release := func() { once.Do(open) }
	var forced atomic.Bool
	var keeper atomic.Pointer[holder] // the holder of the lease whose keep ran
	done := make(chan struct{})
	var wg sync.WaitGroup
	var nextOnce sync.Once
	var mu sync.Mutex
	ending := false // under mu: no goroutine joins wg once the fault ends
	next := sc.rf.watch(runsWith(acquireScript, key), func(context.Context) {
		if forced.Load() {
			nextOnce.Do(func() {
				mu.Lock()
				defer mu.Unlock()
				if ending {
					return
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if w.cohortMovedOn(sc.c, key, keeper.Load(), max(patience, time.Second), done) {
						once.Do(func() {
							open()
							w.count(w.attempts, "mutex crowd whose keep's reply came after the lock's next acquisition")
						})
					}
				}()
			})
		}
	})
	afterRan(r, done, &wg, func() {
		w.count(w.attempts, "mutex crowd whose keep ran, its reply held back")
		keeper.Store(cohortHolder(sc.c, key))
		w.forceFrom(sc, t)
		forced.Store(true)
		select {
		case <-time.After(hold):
			release()
		case <-done:
		}
	})
	return func() {
		mu.Lock()
		ending = true
		mu.Unlock()
		close(done)
		wg.Wait()
		sc.rf.drop(r)
		sc.rf.drop(next)
		release()
		faultEnded()
	}
}

// forcedSince reports whether a ForceUnlock of one of res returned after
// at or is on its way: one called while the lease's Unlock was on its way
// (its keep's reply held back, say) took the lock from it.
func (w *world) forcedSince(res []string, at time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.ContainsFunc(res, func(res string) bool { return w.forcedSinceLocked(res, at) })
}

// cohortHolder is the holder of the lease that holds the lock at key for
// its cohort in c, or nil.
func cohortHolder(c *Client, key string) *holder {
	co := c.knownCohort(key)
	if co == nil {
		return nil
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	if co.current == nil {
		return nil
	}
	return co.current.h
}

// cohortMovedOn waits until the lock at key is held for its cohort in c by
// a holder other than old (a lease taken in Redis since, whose delivery
// set the cohort's block), and reports whether it came within patience,
// before done.
func (w *world) cohortMovedOn(c *Client, key string, old *holder, patience time.Duration, done <-chan struct{}) bool {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(patience)
	for {
		if h := cohortHolder(c, key); h != nil && h != old {
			return true
		}
		select {
		case <-tick.C:
		case <-giveUp:
			return false
		case <-done:
			return false
		}
	}
}
