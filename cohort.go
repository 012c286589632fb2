package redisync

import (
	"context"
	"hash/maphash"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// A Mutex is passed on locally: the goroutines of one Client that want
// one lock form its cohort. One of them (the leader) acquires the lock in
// Redis while the others wait in the Client; when the holder unlocks and
// another goroutine of the cohort waits, the lock passes to it without a
// command to Redis: the key, its owner id, its Redis hold and its watchdog
// renewal stay as they are, and the new holder gets a Lease of its own,
// with the next token of the block the leader's acquisition reserved. The
// budget of the lock (WithLocalPasses) bounds the passes in number and
// time; once it is spent, or when no token is left, or nobody waits, the
// next Unlock releases the lock in Redis, and the first waiter of the
// cohort leads the next acquisition there, behind the waiters of other
// Clients.
//
// An Unlock whose budget is spent while goroutines of the cohort wait asks
// Redis to keep the lock for them with a new block of tokens (keep). A
// keep ends or extends a hold in Redis, and keeps a release's guarantees:
// it waits for the replicas WithReplicaAck asks for, a reply that is lost
// (or comes after its Unlock gave up) is followed by a release, and a
// reply that comes after the lease lost the cohort's hold changes nothing
// in the cohort. The Unlocks of one lease keep the lock one at a time
// (settle), so that none releases in Redis the hold another passed on.
//
// The Client's memory may narrow what Redis says, never widen it. What the
// cohort keeps (a block of tokens, "this lease holds alone", the time the
// budget runs to) stands for facts only Redis knows: that the Client still
// owns the lock, that nothing else holds it through the same owner id, and
// that the lock's token counter stands where the block was reserved. So
// each is checked where a pass uses it (handOn), not trusted from where it
// was set, and whatever the Client sees that may have moved one of those
// facts in Redis voids it, without a command to Redis on the pass's path:
//   - A re-entry about to be sent (its hold may be in Redis before its
//     reply is back) or granted, and a Group or Quorum that re-enters the
//     lock through one of its leases (it raises the token counter to the
//     group's token), mark the ownership re-entered (leaseFrom): it is
//     never passed on locally again, and its Unlocks go to Redis.
//   - An invalidation of the lock's key (DetectOnChange) says that its
//     hash changed: the block is void (voidPasses), and the next Unlock
//     asks Redis for a new budget, which checks ownership and the counter.
//     So does the Client's own ForceUnlock of the lock, before it is sent,
//     whatever becomes of the invalidation that follows it.
//   - The budget's time runs from when the command whose reply vouched for
//     the hold (the acquisition, the hand-over, the new budget) was sent,
//     not from when its reply arrived: a late reply leaves less of it, or
//     none.
//   - A Client that learns of changes only when it renews (DetectOnRenewal)
//     hears of none between two replies of Redis: its block vouches for one
//     pass, made as the reply that reserved it arrives. Its acquisitions
//     reserve no tokens, and every Unlock that finds a goroutine waiting
//     asks Redis for a new budget (keep), which checks that the ownership
//     still holds the lock and reserves a token above every one handed out
//     so far; the pass follows that reply, or the lock is released.
// What remains, for a Client that detects changes (DetectOnChange), is a
// change in Redis that the Client has not seen yet: a pass may be
// delivered while another Client holds the lock (with a lower token than
// theirs, so fencing refuses it) until the change's invalidation arrives,
// about one round trip after it, or at most the budget's time after the
// acquisition that reserved the block was sent, when the Client did not
// read the key since. An invalidation that arrives while the reply that
// reserves a block is on its way cannot be told from that of the
// command's own write: the reply vouches for nothing it did not see. A
// lead's block is dropped (the first pass asks Redis, keep). A keep's
// reply passes nothing on until Redis confirms the ownership once more
// (keep): the keep's own write ends the tracking of the key until the
// tracker reads it again, so a change after the keep ran may bring no
// invalidation, and a reply held back (or a lapse of the Client that
// holds up its check of a change) would otherwise stretch the window. A
// Client that detects changes on renewal passes locks on locally only
// when asked to (WithLocalPasses), each pass one round trip to Redis.

// cohort is the goroutines of one Client that want one Mutex.
type cohort struct {
	c   *Client
	key string // the lock key, its name in Client.cohorts

	mu   sync.Mutex
	refs int // acquisitions and holders using it; it goes at 0
	// leading is set while a goroutine of the cohort acquires the lock in
	// Redis, or is told to.
	leading bool
	// current is the lease that holds the lock for the cohort, nil while
	// the cohort does not hold it in a way it can pass on.
	current *Lease
	// The budget of local passes left: the tokens next to top, until a
	// time.
	next  uint64 // the token of the next local pass
	top   uint64 // the last token reserved
	until time.Time
	// budget and within are the budget of the lock's last leader
	// (WithLocalPasses), which keep asks Redis for again.
	budget  int
	within  time.Duration
	waiters []*localWaiter
	// voids counts the changes of the lock's hash the Client heard of
	// (voidPasses): a keep's check of the ownership vouches for no pass
	// when one came while it was on its way (see keep).
	voids uint64
}

// localWaiter is a goroutine of the cohort that waits for the lock in the
// Client.
type localWaiter struct {
	ctx   context.Context
	since time.Time
	// turn gets, once, the lock passed on to the waiter, or nil: the lead
	// of the next acquisition in Redis.
	turn chan *Lease
}

// cohortShards is how many shards a Client keeps its cohorts in, each
// under a mutex of its own: an uncontended Lock and Unlock look up and
// drop their cohort, and goroutines locking keys of their own then rarely
// wait for one another (with one mutex, they queued on it at every cycle).
const cohortShards = 32

// cohortShard is a part of a Client's cohorts: those of the lock keys that
// cohortShardOf sends to it.
type cohortShard struct {
	mu sync.Mutex
	m  map[string]*cohort
}

// cohortSeed spreads the lock keys over the shards.
var cohortSeed = maphash.MakeSeed()

// cohortShardOf is the shard of the cohort of the lock key. Every use of
// that cohort in the Client's map is under its mutex.
func (c *Client) cohortShardOf(key string) *cohortShard {
	return &c.cohorts[maphash.String(cohortSeed, key)%cohortShards]
}

// cohortOf returns the cohort of the lock key, counting one more user.
func (c *Client) cohortOf(key string) *cohort {
	sh := c.cohortShardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	co := sh.m[key]
	if co == nil {
		if sh.m == nil {
			sh.m = make(map[string]*cohort)
		}
		co = &cohort{c: c, key: key}
		sh.m[key] = co
	}
	co.mu.Lock()
	co.refs++
	co.mu.Unlock()
	return co
}

// localHolder is the owner id of the lease that holds the lock at key for
// its cohort, "" when none does: whom a local waiter waited for.
func (c *Client) localHolder(key string) string {
	co := c.knownCohort(key)
	if co == nil {
		return ""
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	if co.current == nil || co.current.h == nil {
		return ""
	}
	return co.current.h.owner
}

// knownCohort returns the cohort the Client keeps for the lock key, nil
// when it keeps none; it counts no user.
func (c *Client) knownCohort(key string) *cohort {
	sh := c.cohortShardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.m[key]
}

// knownCohorts returns every cohort the Client keeps.
func (c *Client) knownCohorts() []*cohort {
	var cos []*cohort
	for i := range c.cohorts {
		sh := &c.cohorts[i]
		sh.mu.Lock()
		for _, co := range sh.m {
			cos = append(cos, co)
		}
		sh.mu.Unlock()
	}
	return cos
}

// drop counts one user of the cohort less; the Client forgets an unused
// cohort.
func (co *cohort) drop() {
	sh := co.c.cohortShardOf(co.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	co.mu.Lock()
	co.refs--
	unused := co.refs == 0
	co.mu.Unlock()
	if unused && sh.m[co.key] == co {
		delete(sh.m, co.key)
	}
}

// acquireLocally acquires m for a goroutine of its cohort: it leads the
// acquisition in Redis when nobody of the cohort holds or acquires the
// lock, and otherwise waits in the Client until the lock is passed on to
// it or it is told to lead. A waiter whose ctx ends, or whose Client
// closes, leaves nothing held: a lease passed on to it meanwhile goes on
// to the next waiter or is released, and a lead it was given goes to the
// next waiter.
func (c *Client) acquireLocally(ctx context.Context, m *Mutex) (*Lease, error) {
	co := c.cohortOf(m.keys.lock)
	co.mu.Lock()
	if !co.leading && co.current == nil {
		co.leading = true
		co.mu.Unlock()
		return co.lead(ctx, m)
	}
	w := &localWaiter{ctx: ctx, since: time.Now(), turn: make(chan *Lease, 1)}
	co.waiters = append(co.waiters, w)
	co.mu.Unlock()
	var err error
	select {
	case l := <-w.turn:
		if l == nil {
			return co.lead(ctx, m)
		}
		if err := ctx.Err(); err != nil {
			c.abandonAfter(ctx, l, err)
			return nil, err
		}
		if f := c.cfg.metrics.PassedOn; f != nil {
			f(mutexKind.primitive, m.name, time.Since(w.since))
		}
		return l, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-c.closed:
		err = ErrClosed
	}
	co.mu.Lock()
	for i, o := range co.waiters {
		if o == w {
			co.waiters = append(co.waiters[:i], co.waiters[i+1:]...)
			co.mu.Unlock()
			co.drop()
			return nil, err
		}
	}
	co.mu.Unlock()
	// Its turn came as it gave up: pass it on.
	if l := <-w.turn; l != nil {
		c.abandonAfter(ctx, l, err)
	} else {
		co.endLead()
	}
	return nil, err
}

// lead acquires the lock in Redis for the cohort, reserving a token for
// each local pass of its budget, whether it takes the lock free or a
// release hands it over (fewer when the tokens come close to the server's
// clock, see reserve_tokens in lua/lock.lua). The lease it gets holds for
// the cohort until its Unlock; on an error the next waiter leads.
func (co *cohort) lead(ctx context.Context, m *Mutex) (*Lease, error) {
	// Tokens are reserved while other goroutines of the cohort wait: an
	// acquisition nobody waits behind costs the script nothing more, and
	// waiters that come later are passed the lock once its Unlock got
	// tokens (keep).
	co.mu.Lock()
	voids := co.voids
	co.mu.Unlock()
	reserve := func() int {
		co.mu.Lock()
		defer co.mu.Unlock()
		voids = co.voids // as the attempt that may reserve is sent
		if len(co.waiters) == 0 || !co.vouchesBetweenReplies() {
			// A Client that learns of changes only when it renews passes
			// on from a keep's reply alone (see keep).
			return 0
		}
		return m.cfg.localPasses
	}
	l, reserved, err := m.queued().acquireReserving(ctx, false, reserve)
	if err != nil {
		co.endLead()
		return nil, err
	}
	h := l.h
	// The budget runs from when the command that took the lock was sent
	// (h.lastOK), the last moment Redis vouches for, not from when its
	// reply or message arrived.
	h.mu.Lock()
	confirmed := h.lastOK
	h.mu.Unlock()
	co.mu.Lock()
	if !co.vouchesBetweenReplies() {
		reserved = 0 // no block but a keep's (see reserve)
	}
	if co.voids != voids {
		// The lock's hash changed after the attempt that reserved the
		// block was sent, and the change may have come after its script
		// ran (a ForceUnlock, another owner): the reply vouches for the
		// hold as it was then, and the Client's memory may narrow what
		// Redis says, never widen it. The block passes nothing on; the
		// next Unlock that finds a goroutine waiting asks Redis for a new
		// budget (keep), which checks the ownership. The change is most
		// often the script's own write, invalidating a key the Client
		// read while it waited: that costs the first pass a round trip.
		reserved = 0
	}
	co.leading = false
	co.current, co.until = l, confirmed.Add(m.cfg.localWithin)
	co.budget, co.within = m.cfg.localPasses, m.cfg.localWithin
	co.next, co.top = h.token+1, h.token+uint64(reserved)
	co.mu.Unlock()
	h.mu.Lock()
	l.co = co
	l.lost = make(chan struct{})
	lost := h.done
	if lost {
		close(l.lost)
	}
	h.mu.Unlock()
	if lost {
		co.lose(l)
	}
	return l, nil
}

// lose ends the hold of the cohort that l had when its ownership was
// lost: the first waiter leads the next acquisition in Redis.
func (co *cohort) lose(l *Lease) {
	co.mu.Lock()
	mine := co.current == l
	if mine {
		co.current = nil
		co.promote()
	}
	co.mu.Unlock()
	if mine {
		co.drop()
	}
}

// endLead ends a lead that did not get the lock: the first waiter leads
// next.
func (co *cohort) endLead() {
	co.mu.Lock()
	co.leading = false
	co.promote()
	co.mu.Unlock()
	co.drop()
}

// promote tells the first waiter to lead, when nobody of the cohort holds
// or acquires the lock. Call it with co.mu held.
func (co *cohort) promote() {
	if co.leading || co.current != nil || len(co.waiters) == 0 {
		return
	}
	w := co.waiters[0]
	co.waiters = co.waiters[1:]
	co.leading = true
	w.turn <- nil
}

// unlockState is how the Unlock of a lease of the cohort goes.
type unlockState int

const (
	unlockInRedis unlockState = iota // release the hold in Redis
	unlockPassed                     // passed on locally: done
	unlockGone                       // passed on before: not held
	unlockKeep                       // keep it for the waiters if Redis allows (keep)
	unlockBusy                       // another Unlock of the lease keeps it: wait (settle)
)

// pass passes the lock l holds on to the first waiter, when the budget
// allows. When the budget is spent and goroutines of the cohort wait,
// unlockKeep asks Redis for more (keep, which then tells what ends l's
// hold of the cohort). Otherwise l releases the lock in Redis, and, once
// that is done (ended called), the first waiter leads the next
// acquisition. A lease passed on before is unlockGone: its Unlock must not
// release the hold its successor carries; one whose keep is on its way is
// unlockBusy: the keep decides whether it still holds (settle). mayKeep
// false releases without asking for more.
func (co *cohort) pass(l *Lease, mayKeep bool) (st unlockState, ended func()) {
	co.mu.Lock()
	defer co.mu.Unlock()
	switch {
	case l.passedOn:
		return unlockGone, nil
	case l.keeping != nil:
		return unlockBusy, nil
	case co.current != l:
		// Released in Redis before (a retry), or re-entered.
		return unlockInRedis, func() {}
	}
	if co.handOn(l) {
		return unlockPassed, nil
	}
	if mayKeep && len(co.waiters) > 0 && co.alone(l) {
		l.keeping = make(chan struct{})
		return unlockKeep, nil
	}
	return unlockInRedis, co.forget(l)
}

// settle is pass once no other Unlock of l keeps the lock (keep): one at a
// time, so that a second Unlock never releases in Redis the hold the first
// passed on. A lease that ended meanwhile is unlockGone. It returns ctx's
// error if ctx ends while it waits.
func (co *cohort) settle(ctx context.Context, l *Lease, mayKeep bool) (unlockState, func(), error) {
	for {
		st, ended := co.pass(l, mayKeep)
		if st != unlockBusy {
			return st, ended, nil
		}
		co.mu.Lock()
		kept := l.keeping
		co.mu.Unlock()
		if kept != nil {
			select {
			case <-kept:
			case <-ctx.Done():
				return st, nil, ctx.Err()
			}
		}
		if l.ended() != nil {
			return unlockGone, nil, nil
		}
	}
}

// alone reports whether l is the only lease of its holder, which is held
// and was never re-entered: a lock held through a re-entry too, or one
// whose re-entry is on its way, or lost, is not passed on. Redis may count
// more holds than the Client's leases (a re-entry whose reply has not come
// back), never fewer.
func (co *cohort) alone(l *Lease) bool {
	h := l.h
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.done && !h.reentered && len(h.leases) == 1
}

// handOn passes the lock from l, the cohort's current lease, to the first
// waiter, with the next token, when the Client can vouch for it now: a
// waiter waits, a token of the block is left and the block is still live
// (within the budget's time, and not voided by a change of the lock's hash
// the Client heard of, see voidPasses), and l is its holder's only lease
// of an ownership never re-entered and not lost (alone). Otherwise it
// returns false, and Redis decides. Call it with co.mu held.
func (co *cohort) handOn(l *Lease) bool {
	if len(co.waiters) == 0 || co.next > co.top || !time.Now().Before(co.until) {
		return false
	}
	h := l.h
	w := co.waiters[0]
	h.mu.Lock()
	if h.done || h.reentered || len(h.leases) != 1 {
		h.mu.Unlock()
		return false
	}
	nl := newLease(w.ctx, h, l.hold)
	nl.co, nl.token, nl.lost = co, co.next, make(chan struct{})
	delete(h.leases, l)
	h.leases[nl] = struct{}{}
	co.waiters = co.waiters[1:]
	co.next++
	co.current = nl
	if !co.vouchesBetweenReplies() {
		// Nothing tells a Client that detects changes on renewal that the
		// lock moved on after the reply that vouched for this pass: the
		// block is spent, and the next pass follows another reply (keep).
		co.until = time.Time{}
	}
	h.mu.Unlock()
	l.mu.Lock()
	l.passedOn = true
	l.mu.Unlock()
	w.turn <- nl
	return true
}

// vouchesBetweenReplies reports whether the Client hears of a change of a
// lock's key between two replies of Redis (DetectOnChange): only then may a
// block of tokens serve passes after the reply that reserved it.
func (co *cohort) vouchesBetweenReplies() bool {
	return co.c.LossDetection() == DetectOnChange
}

// keep runs l's release in Redis asking to keep the lock for the cohort's
// waiters instead: Redis keeps it when nobody waits there (another
// Client's waiter, a Group), with a new block of tokens, and the lock
// passes to the first waiter on a new budget (passed). A keep ends or
// extends a hold in Redis, and keeps a release's guarantees:
//   - It waits for the replicas WithReplicaAck asks for, as an acquisition
//     does: a block fewer replicas acknowledged is not handed out, since a
//     replica promoted without it would hand out its tokens again.
//   - A reply that comes after l lost the cohort's hold (lose: another
//     goroutine of the cohort may have taken the lock in Redis since, with
//     a greater token) passes nothing on and leaves the cohort's tokens as
//     they are: l's hold is released as any Unlock's.
//   - For a Client that detects changes, a reply passes on only once a
//     check in Redis, sent after it, finds the ownership still holding,
//     with no change of the lock's hash heard of (voidPasses) while the
//     check was on its way: a change may have come after the keep ran,
//     and the keep's own write ends the tracking that would tell of it.
//     A Client that detects changes on renewal passes on from the reply
//     (see handOn): its window is the budget's time from the keep's send.
//   - A reply that never comes (lost, or after ctx ended) leaves the lock
//     kept or not: a release of l's hold follows, as any Unlock's, given
//     inflightGrace past ctx's end, so that the cohort's waiters are not
//     left behind a hold that the watchdog renews for nobody.
//
// When the lock is not passed on, the lock is released (or was by the
// keep itself) with the outcome st and err, and ended is to be called
// once the caller is done with the release: the first waiter leads the
// next acquisition in Redis.
func (co *cohort) keep(ctx context.Context, l *Lease) (passed bool, st releaseState, err error, ended func()) {
	h := l.h
	c := h.c
	co.mu.Lock()
	budget, within, voids := co.budget, co.within, co.voids
	if !co.vouchesBetweenReplies() {
		budget = 1 // the block vouches for one pass (see handOn)
	}
	co.mu.Unlock()
	e := c.releaseExec(h.keys, h.owner, l.hold)
	e.Args = append(e.Args, strconv.Itoa(budget))
	sent := time.Now()
	var res any
	acked := true
	if c.cfg.ackReplicas == 0 {
		res, err = releaseScript.exec(ctx, c.rc, e.Keys, e.Args).ToAny()
	} else {
		actx, done := inflight(ctx)
		var msg rueidis.RedisMessage
		var n int64
		if msg, n, err = releaseScript.execWaiting(actx, c.rc, e.Keys, e.Args, c.cfg.ackReplicas, c.cfg.ackTimeout); err == nil {
			res, err = msg.ToAny()
			acked = n >= int64(c.cfg.ackReplicas)
		}
		done()
	}
	a, kept := res.([]any)
	kept = err == nil && kept && len(a) == 3
	vouched := kept && acked
	co.mu.Lock()
	// A Client that detects changes checks every keep's reply once.
	mustCheck := co.vouchesBetweenReplies()
	for checks := 0; vouched && co.current == l && (mustCheck || co.voids != voids); checks++ {
		// The reply vouches for the hold as it was when the keep ran, and
		// the lock may have changed since (a ForceUnlock, another owner)
		// without a word to the Client: the keep's own write ends the
		// tracking of the key by each connection that read it, until the
		// tracker reads it again, and a key whose last change the tracker
		// has not read yet brings no invalidation at all. The same holds
		// for a change the Client heard of while the keep (or the last
		// check) was on its way, whose check is not done. The Client's
		// memory may narrow what Redis says, never widen it: the block
		// passes nothing on until Redis says the ownership still holds,
		// with no change heard of while it said so. A check that finds it
		// lost reports the loss. A lease whose loss was reported (it no
		// longer holds for the cohort, or its holder ended) is not
		// checked: Redis is asked nothing about an ownership the Client
		// gave up.
		mustCheck = false
		voids = co.voids
		co.mu.Unlock()
		if h.ended() || checks == keepChecks {
			vouched = false
		} else {
			held, _ := c.watchdog.check(ctx, []*holder{h})
			vouched = len(held) == 1
		}
		co.mu.Lock()
	}
	// Only while l still holds for the cohort: once it lost the hold, the
	// block is older than the tokens of the cohort's next acquisition.
	if vouched && co.current == l {
		from, _ := a[1].(int64)
		n, _ := a[2].(int64)
		co.next, co.top, co.until = uint64(from)+1, uint64(from)+uint64(n), sent.Add(within)
		if len(co.waiters) > 0 && co.handOn(l) {
			co.mu.Unlock()
			return true, freed, nil, nil
		}
	}
	ended = co.forget(l)
	co.mu.Unlock()
	if err != nil || kept {
		// Not to be passed on: the keep failed (kept or not), nobody waits
		// any more, the replicas did not acknowledge the block, the lease
		// is lost, or the check of the ownership did not answer before ctx
		// ended. Released now, as the second half of a call made within
		// ctx: with the grace of a call on its way, or an end of ctx during
		// the keep would leave the lock kept in Redis, and renewed, for
		// nobody. A release after a failed keep that finds the lock moved
		// on reports what the keep did (see Unlock and l.unsure).
		if err != nil {
			l.mu.Lock()
			if l.unsure.IsZero() {
				l.unsure = sent
			}
			l.mu.Unlock()
		}
		actx, done := inflight(ctx)
		defer done()
		st, err = h.kind.unlock(actx, h, l.hold)
		return false, st, err, ended
	}
	n, _ := res.(int64)
	return false, releaseStateOf(n), nil, ended
}

// keepChecks bounds the checks of ownership that a keep's reply waits for
// while changes of the lock keep coming (see keep): the keep's own write
// brings one invalidation per connection of the Client that read the key.
const keepChecks = 3

// endKeep ends the keep of an Unlock of l (pass marked it), once that
// Unlock is done with l: another Unlock of l may go on (settle).
func (co *cohort) endKeep(l *Lease) {
	co.mu.Lock()
	defer co.mu.Unlock()
	close(l.keeping)
	l.keeping = nil
}

// forget ends l's hold of the cohort, if it still has it, and returns what
// to call once l's release in Redis is done: the first waiter leads the
// next acquisition, and l's user of the cohort is counted off, unless a
// loss (lose) ended the hold before and counted it. Call it with co.mu
// held.
func (co *cohort) forget(l *Lease) (ended func()) {
	mine := co.current == l
	if mine {
		co.current = nil
	}
	return func() {
		co.mu.Lock()
		co.promote()
		co.mu.Unlock()
		if mine {
			co.drop()
		}
	}
}

// detach lets the lock that l holds go without a release: the first
// waiter leads the next acquisition, which waits for the lock to expire.
func (co *cohort) detach(l *Lease) { co.lose(l) }

// voidPasses voids the blocks of tokens that the cohorts of the locks at
// keys (of every lock, when all) hold for local passes: Redis told the
// Client that the lock's hash changed (an invalidation, see tracker), and
// what changed it (a Group's token, another owner, a forced unlock) is not
// known until the Client asks; or the Client force-unlocks the lock itself
// (Mutex.ForceUnlock). The next Unlock asks Redis for a new budget (keep),
// which finds out. It runs in a connection's reader: it must not block.
func (c *Client) voidPasses(keys []string, all bool) {
	var cos []*cohort
	if all {
		cos = c.knownCohorts()
	} else {
		for _, k := range keys {
			if co := c.knownCohort(k); co != nil {
				cos = append(cos, co)
			}
		}
	}
	for _, co := range cos {
		co.mu.Lock()
		co.until = time.Time{}
		co.voids++
		co.mu.Unlock()
	}
}
