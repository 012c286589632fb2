package redisync

import (
	"math/rand/v2"
	"sync"
	"time"
)

// The operations of TestSchedule that make one Client's goroutines meet on
// one lock: what a Client's local passes, keeps and their blocks of tokens
// serve, and the Groups taken through a lease passed on locally.

// crowd has a few goroutines of sc take one of its Mutexes at once, a few
// times each, as acquireOnce does (with its re-entries, Groups through the
// lease's Context, mid-hold operations and Unlocks): the holder's Unlock
// finds a waiter of its own Client, so a Client given a budget of local
// passes keeps the lock in Redis and passes it on. It returns once they
// all did, or after stop.
func (w *world) crowd(rnd *rand.Rand, sc *schedClient, ts []*target, stop <-chan struct{}) {
	// One of the Mutexes, which the targets begin with; of those passed on
	// locally (a budget of local passes, a lease the watchdog renews)
	// within a window their goroutines meet in, if any, and of those a
	// Group of the Client shares, two times in three.
	var passing, grouped []*target
	for _, t := range ts[:len(mutexNames)] {
		if cfg := t.mutex.cfg; t.mutex.passesLocally() && cfg.localWithin >= 100*time.Millisecond {
			passing = append(passing, t)
			if len(t.groups) > 0 {
				grouped = append(grouped, t)
			}
		}
	}
	if len(grouped) > 0 && rnd.IntN(3) > 0 {
		passing = grouped
	}
	t := ts[rnd.IntN(len(mutexNames))]
	kind := "mutex crowd of one Client"
	if len(passing) > 0 {
		t, kind = passing[rnd.IntN(len(passing))], "mutex crowd of one Client, with local passes"
	}
	n, rounds := 2+rnd.IntN(3), 1+rnd.IntN(3)
	w.count(w.attempts, kind)
	if len(passing) > 0 {
		defer w.keepInFlight(rnd, sc, t)()
	}
	var wg sync.WaitGroup
	for g := range n {
		s := rnd.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			grnd := rand.New(rand.NewPCG(s, uint64(g)))
			for range rounds {
				select {
				case <-stop:
					return
				default:
				}
				w.acquireOnce(grnd, sc, t)
			}
		}()
	}
	wg.Wait()
}

// passedLocally reports whether l was passed on locally: it has a token of
// its own, from its cohort's block, above its holder's.
func passedLocally(l *Lease) bool {
	return l.co != nil && l.token != 0
}

// groupChance is one in how many of t's leases take one of its Groups with
// their Context: every one passed on locally, whose token is their own,
// not their holder's, and a sixth of the others.
func groupChance(l *Lease) int {
	if passedLocally(l) {
		return 1
	}
	return 6
}

// strayForce force-unlocks one of the Mutex or FairMutex names from sc,
// which need not hold it, as an operator would: whoever holds it (another
// Client, a goroutine of sc whose keep is on its way, a lease passed on
// locally) loses it, and the Client that held it must not pass on a hold
// it no longer has.
func (w *world) strayForce(rnd *rand.Rand, sc *schedClient, ts []*target) {
	w.forceUnlock(ts[rnd.IntN(len(mutexNames)+len(fairNames))], sc)
}

// cohortTook notes, for l, a Mutex lease of a cohort taken in Redis (not
// passed on locally), when its acquisition was sent: every block of
// tokens its holder passes on from was reserved then or later.
func (w *world) cohortTook(l *Lease) {
	if l.co == nil || l.token != 0 || l.h == nil {
		return
	}
	h := l.h
	h.mu.Lock()
	sent := h.lastOK
	h.mu.Unlock()
	w.cohortGrants.LoadOrStore(h, sent)
}

// grantSent is grantSent(r), for a lease passed on locally no earlier
// than when its holder's acquisition was sent (cohortTook): a pass's
// token comes from a block its holder reserved.
func (w *world) grantSent(r *rec) time.Time {
	g := grantSent(r)
	if passedLocally(r.lease) {
		if sent, ok := w.cohortGrants.Load(r.lease.h); ok {
			g = later(g, sent.(time.Time))
		}
	}
	return g
}
