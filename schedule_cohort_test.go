package redisync

import (
	"fmt"
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
		defer w.keepInFlight(rnd, sc, t, 0)()
	}
	w.crowdRounds(rnd, sc, t, n, rounds, stop)
}

// crowdRounds has n goroutines of sc take t rounds times each, as
// acquireOnce does; it returns once they all did, or after stop.
func (w *world) crowdRounds(rnd *rand.Rand, sc *schedClient, t *target, n, rounds int, stop <-chan struct{}) {
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

// plainCrowds runs, beside the actors of a schedule (seed), one more on
// each Client whose crowds can meet with a reply held back (faultsCrowds):
// it runs plainCrowd after plainCrowd until stop, every other one with an
// invalidation, on a random source of its own, so that the other actors' choices are those they make without
// it.
func (w *world) plainCrowds(seed uint64, clients []*schedClient, targets [][]*target, stop <-chan struct{}, wg *sync.WaitGroup) {
	for _, sc := range clients {
		if !faultsCrowds(sc) {
			continue
		}
		rnd := rand.New(rand.NewPCG(seed^uint64(sc.i), 0xc40d))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				w.plainCrowd(rnd, sc, targets[sc.i], i%2 == 0, stop)
			}
		}()
	}
}

// plainCrowd has 3 or 4 goroutines of sc take a plain Mutex of its own
// (withoutReentries) four times each: unless invalidation, with a budget
// of one or two passes,
// a lease passed on locally keeps the lock in Redis once its block runs
// out, a keep whose reply comes after a ForceUnlock (keepInFlight); if
// invalidation, with a large one, the Client hears of a ForceUnlock while its block has
// tokens left, before it knows the hold is gone (invalidationInFlight).
func (w *world) plainCrowd(rnd *rand.Rand, sc *schedClient, ts []*target, invalidation bool, stop <-chan struct{}) {
	t, n := ts[rnd.IntN(len(mutexNames))], 3+rnd.IntN(2)
	if invalidation {
		t = w.withoutReentries(sc, t, DefaultLocalPasses)
		w.count(w.attempts, "mutex crowd on a plain handle, its tracking read held back")
		defer w.invalidationInFlight(sc, t)()
	} else {
		t = w.withoutReentries(sc, t, 1+rnd.IntN(2))
		w.count(w.attempts, "mutex crowd on a plain handle, its keep held back")
		defer w.keepInFlight(rnd, sc, t, 2*plainLease+time.Second/2)()
	}
	w.crowdRounds(rnd, sc, t, n, 4, stop)
}

// faultsCrowds reports whether the crowds of sc meet on a plain lock with
// a reply held back (see crowd): its replies can be held back, it learns
// of changes, and its keeps go through the wrapper (it does not wait for
// replicas, which takes a dedicated connection).
func faultsCrowds(sc *schedClient) bool {
	return sc.rf != nil && sc.c.LossDetection() == DetectOnChange && sc.c.cfg.ackReplicas == 0
}

// plainLease is the watchdog lease of a crowd's plain Mutex.
const plainLease = time.Second

// withoutReentries is t without its re-entries and Groups, over a Mutex
// of sc's own (a name no other Client takes, so that the crowd is the
// lock's only contender) with a budget of passes local passes within 2 s
// and a lease of plainLease (renewed by the watchdog), with t's waiter
// expiry: a lease passed on locally then stays its holder's only one, and once the block
// of tokens runs out, its Unlock asks Redis to keep the lock for the crowd
// (the keep that keepInFlight holds back). With them, every lease passed
// on locally takes a Group through its Context and is released in Redis.
// A holder whose release is on its way learns of its loss from a renewal
// only once its lease ran out: a short lease brings that, and the crowd's
// next acquisition, within the block's window.
func (w *world) withoutReentries(sc *schedClient, t *target, passes int) *target {
	plain := *t
	plain.reenter, plain.groups = nil, nil
	name := fmt.Sprintf("m:crowd:c%d", sc.i)
	m := sc.c.Mutex(name, WithLocalPasses(passes, 2*time.Second), WithWaiterExpiry(t.mutex.cfg.waiterExpiry), WithRenewedLease(plainLease))
	plain.res, plain.mutex, plain.lease, plain.fixed = []string{"mutex:" + name}, m, plainLease, false
	plain.lock, plain.try, plain.acquire, plain.force = m.Lock, m.TryLock, m.Acquire, m.ForceUnlock
	plain.owner, plain.inspect = w.mutexOwner(name), w.mutexInspect(name)
	return &plain
}

// checkPassToken checks a lease l of t that c delivered: passed on
// locally, its token comes from a block its holder reserved in Redis at or
// after its own acquisition, so it is above the holder's token.
func (w *world) checkPassToken(t *target, l *Lease, c int) {
	if passedLocally(l) && l.token <= l.h.token {
		w.violation("pass-token-not-above-holder", "%s %v of c%d passed on locally at %s with token %d, not above its holder's %d",
			t.prim, t.res, c, w.rel(time.Now()), l.token, l.h.token)
	}
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

// forceFrom force-unlocks t, a Mutex that sc holds, from another Client:
// one whose target t is, or else the next Client over a handle of t's name.
func (w *world) forceFrom(sc *schedClient, t *target) {
	if w.forceElsewhere(sc, t.mutex.keys.lock) {
		return
	}
	w.mu.Lock()
	clients := w.schedClients
	w.mu.Unlock()
	other := clients[(sc.i+1)%len(clients)]
	m := other.c.Mutex(t.mutex.name)
	w.count(w.attempts, "force unlock while a reply is on its way")
	w.forceUnlock(&target{prim: t.prim, res: t.res, mutex: m, force: m.ForceUnlock}, other)
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
