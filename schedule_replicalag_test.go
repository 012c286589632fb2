package redisync

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redisync/redisync/internal/redistest"
)

// What TestSchedule checks of WithReplicaAck before a failover, on a
// primary with a replica: every grant (an acquisition, a re-entry, the
// block of tokens a keep reserves for local passes) was acknowledged by
// the replica before its Lease was delivered. So once a Mutex lease is
// delivered, the replica's copy of the lock has a token (the ownership's,
// or the last one reserved) at least the lease's: tokens only rise, and a
// hash freed since is gone from the replica too, or taken afresh with a
// greater token. The replication link is slow (replicaLag), and slower at
// times ("lag-replica"), which the replica's acknowledgement waits out and
// a grant that skipped it does not.

// replicaLag is how much the replication link of a schedule's pair delays
// what it carries, each way: the replica is a little behind, as an
// asynchronous replica is.
const replicaLag = 3 * time.Millisecond

// checkOnReplica checks that the replica has r's grant, for a Mutex or
// Group lease delivered on a primary with a replica before any failover
// began (after one, the replica is new, and the checks of
// schedule_failover_test.go say what a failover may lose). A Group's
// grant includes the raise of each member's fencing counter to the
// group's token, which a Group taken one lock at a time makes after its
// members' acquisitions.
func (w *world) checkOnReplica(r *rec) {
	if w.pair == nil {
		return
	}
	var keys []string
	switch {
	case r.prim == "mutex" && r.lease.h != nil:
		keys = []string{r.lease.h.keys.lock}
	case r.prim == "group":
		for _, res := range r.res {
			if name, ok := strings.CutPrefix(res, "mutex:"); ok {
				keys = append(keys, w.observer.keysFor(name).lock)
			}
		}
	default:
		return
	}
	// The replica is read under w.mu while no failover began: a failover
	// marks its beginning under w.mu before it replaces the replica.
	w.mu.Lock()
	var replica *redistest.Server
	if w.fo == nil {
		replica = w.pair.replica
	}
	w.mu.Unlock()
	if replica == nil {
		return
	}
	for _, key := range keys {
		w.checkKeyOnReplica(r, replica, key)
	}
}

// checkKeyOnReplica checks that the replica's copy of the lock at key has
// a token at least r's, or is gone (freed since).
func (w *world) checkKeyOnReplica(r *rec, replica *redistest.Server, key string) {
	got, err := replica.Do("HMGET", key, "token", "t")
	if err != nil {
		return // a reply that did not come: nothing to say
	}
	var top uint64
	for _, f := range strings.Split(got, "\n") {
		if v, err := strconv.ParseUint(f, 10, 64); err == nil {
			top = max(top, v)
		}
	}
	switch {
	case top == 0:
		// Freed since: the primary's deletion reached the replica.
		w.count(w.failures, r.prim+" grant looked for on the replica: freed since")
	case top >= r.token:
		w.count(w.acquired, r.prim+" grant found on the replica")
	default:
		w.violation("grant-not-on-replica", "%s %v of c%d (token %d, passed on locally %v) delivered at %s, but the replica's copy of %s has token %d at %s; faults: %s",
			r.prim, r.res, r.client, r.token, passedLocally(r.lease), w.rel(r.at), key, top, w.rel(time.Now()), w.faultsAround(r.at.Add(-5*time.Second), time.Now(), 0))
	}
}

// lagReplica slows the replication link of the schedule's pair to a few
// tens of milliseconds each way for d, and returns when that ends.
func (w *world) lagReplica(rnd *rand.Rand, d time.Duration, wg *sync.WaitGroup) time.Time {
	link := w.pair.link // a failover replaces it
	link.SetLatency(time.Duration(10+rnd.IntN(40)) * time.Millisecond)
	wg.Add(1)
	time.AfterFunc(d, func() { defer wg.Done(); link.SetLatency(replicaLag) })
	return time.Now().Add(d)
}

// replicaPassOpts returns the budget of local passes of a Mutex of sc:
// opts, or, on a primary with a replica, for the Client that passes locks
// on locally there (the first), one or two passes within 500ms or 2s: each
// pass or two follows a keep, whose block of tokens the replica must have
// acknowledged before the first of them is delivered (checkOnReplica).
func (w *world) replicaPassOpts(rnd *rand.Rand, sc *schedClient, opts []LockOption) []LockOption {
	if w.pair == nil || sc.i != 0 || sc.c.LossDetection() != DetectOnChange {
		return opts
	}
	return []LockOption{WithLocalPasses(1+rnd.IntN(2), []time.Duration{500 * time.Millisecond, 2 * time.Second}[rnd.IntN(2)])}
}
