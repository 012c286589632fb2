package redisync

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// presence keeps a Client's waiters alive in the queues of the Mutex and
// FairMutex locks they wait for, and is how every waiter learns, whatever
// messages were lost, what they would have told it: messages are for
// latency, the presence pass is for liveness. Each pass (every
// presenceRead, a second, or a third of a shorter waiter expiry) reads,
// per lock and not per waiter, whether the lock is free, and whether it
// was handed to one of the Client's waiters; and for the waiters without a
// place in a queue (Groups and Quorums on a Mutex, Latch waiters, the
// waiters of the Redisson locks, whose queue, if any, is Redisson's)
// whether what they wait for became free or changed (follow): one command
// per channel followed, whatever the number of its waiters. A waiter's
// place is alive while its Client's deadline in the lock's waiters hash
// has not passed (see the prelude), and the Client renews that one
// deadline for all its waiters on the lock every third of the waiter
// expiry, learning as it does whether its places there are whole: what
// waiting costs grows with the Clients and the locks waited for, not with
// the waiting goroutines. A Client with client-side caching reads the
// locks from its cache and renews with plain HSETs (see pass): a lock
// nobody touches costs one command per renewal. A Client that dies stops
// renewing, and its places are passed over once its deadline has passed.
// One goroutine, started with the first waiter.
type presence struct {
	c *Client

	mu      sync.Mutex
	locks   map[string]*presenceEntry // by waiters key
	orphans []orphanLeave             // leaves that failed, retried at the next passes
	clock   serverClock               // the server's clock, for plain renewals
	// loop sleeps until its next pass or check; pace is the time between
	// passes it sleeps with, zero when it sleeps with nothing to renew.
	loop
	pace time.Duration

	// stall, held, stalls the passes, as a paused process or a Client
	// whose connection is held up would: tests hold it to make the
	// Client's deadlines lapse.
	stall sync.Mutex
}

// presenceEntry is one lock that the Client has waiters on.
type presenceEntry struct {
	keys    lockKeys
	expiry  time.Duration
	waiters int
	touched time.Time // when the keys' expiry was last refreshed
	renewed time.Time // when the Client's deadline was last renewed (sent)
	// checkAt, when not zero, is when the lock may have become free
	// without a message: its holder's lease runs out (a holder that dies
	// publishes nothing), or the waiter another Client's release handed it
	// to, or woke, may be dead. The lock's key is then read, and if it is
	// gone every local waiter looks again: the waiters themselves sleep
	// until a message wakes them.
	checkAt time.Time
	// holder is the owner id of the holder the last pass read, with its
	// PTTL, when checkAt was set from it: the next passes read no PTTL
	// while the same holder has the lock.
	holder string
	// repair is set when a renewal may have written the Client's fields
	// anew without its reply telling the Client: the next pass renews the
	// lock in the script, which answers that its places may be gone.
	repair bool
}

type orphanLeave struct {
	keys  lockKeys // of the lock whose queue the place is in
	leave func(ctx context.Context) error
	tries int
}

// orphanTries bounds the retries of a failed leave while the Client has no
// other waiter on the lock: the place is dead anyway once the Client stops
// renewing its deadline there. While it has one, the deadline it renews
// keeps the place alive, and a release would hand the lock to a waiter that
// is gone: the leave is retried at every pass until it succeeds. A hash's
// settling (settleHash) is bounded alike: a hash it gives up on keeps no
// expiry.
const orphanTries = 3

func newPresence(c *Client) *presence {
	return &presence{
		c: c, locks: make(map[string]*presenceEntry),
		loop: newLoop(),
	}
}

// join counts a waiter that took a place in the lock's queue: its Client's
// deadline there is renewed until it leaves.
func (p *presence) join(keys lockKeys, expiry time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.locks[keys.waiters]
	if e == nil {
		// The waiter's attempt that took the place wrote the deadline.
		now := time.Now()
		e = &presenceEntry{keys: keys, expiry: expiry, touched: now, renewed: now}
		p.locks[keys.waiters] = e
	}
	e.expiry = min(e.expiry, expiry)
	e.waiters++
	// A loop that sleeps at a pace fast enough for this lock (pace is set
	// only while it sleeps with work) is not woken: its next pass comes
	// within a pace of its last one, or of when it last scheduled, both
	// before now (run), so within a pace from now, before the deadline the
	// attempt wrote lapses. A waiter queued on the hot path so costs no
	// goroutine wake-up. An idle loop, a pace too slow for the lock's
	// waiter expiry, or a loop awake (which may have read the locks before
	// this one) is kicked.
	if p.pace > 0 && presencePeriod(e.expiry) >= p.pace {
		return
	}
	p.startOrWake(p.run)
}

// presencePeriod is the time between the passes that renew the Client's
// deadline on a lock of the given waiter expiry: a third of it, at most
// presenceRead.
func presencePeriod(expiry time.Duration) time.Duration {
	return max(min(expiry/3, presenceRead), time.Millisecond)
}

// alone reports whether the Client has no waiter on the lock but the
// caller (counted when joined): a place the caller takes then vouches that
// none of the Client's places there were dropped (see lock_queue.lua).
func (p *presence) alone(keys lockKeys, joined bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.locks[keys.waiters]
	if e == nil {
		return true
	}
	if joined {
		return e.waiters <= 1
	}
	return e.waiters == 0
}

// leave counts a waiter out; once none is left, the deadline is no longer
// renewed, and a repair the lock was due is made all the same (see
// repair).
func (p *presence) leave(keys lockKeys) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.locks[keys.waiters]; e != nil {
		e.waiters--
		if e.waiters == 0 {
			delete(p.locks, keys.waiters)
			if e.repair {
				p.orphans = append(p.orphans, p.settleHash(e.keys, e.expiry))
				p.startOrWake(p.run)
			}
		}
	}
}

// watch has the lock checked when its holder's lease, pttl ms as an
// attempt found it, runs out.
func (p *presence) watch(keys lockKeys, pttl int64) {
	at := time.Now().Add(time.Duration(pttl)*time.Millisecond + time.Millisecond)
	if pttl < 0 { // a key without expiry: not the library's
		at = time.Now().Add(defaultWaiterExpiry)
	}
	p.checkBy(keys.waiters, at)
}

// checkBy moves the check of the lock whose waiters key is k to at, if that
// is sooner.
func (p *presence) checkBy(k string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.locks[k]
	if e == nil || (!e.checkAt.IsZero() && !at.Before(e.checkAt)) {
		return
	}
	e.checkAt = at
	// A sleeping loop has its timer brought forward to at, if it would
	// sleep longer, rather than being woken now; it then checks what is
	// due (check) and schedules the rest.
	p.wakeBy(at, p.run)
}

// orphan records a waiter whose leave failed (the connection broke as it
// gave up its place), to retry it at the next passes: the loop runs for it
// every renewRetry when nothing else is waited for.
func (p *presence) orphan(keys lockKeys, leave func(ctx context.Context) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.orphans = append(p.orphans, orphanLeave{keys: keys, leave: leave})
	p.startOrWake(p.run)
}

// close stops the loop, then tries once more, within cleanupTimeout, the
// leaves the passes still retry: a place left in a queue is handed the
// lock by a release and holds it up until the place's expiry, and a
// waiters hash left to settle (settleHash) keeps no expiry at all.
func (p *presence) close() {
	p.end(&p.mu)
	p.mu.Lock()
	orphans := p.orphans
	p.orphans = nil
	p.mu.Unlock()
	if len(orphans) == 0 {
		return
	}
	ctx, cancel := detached(context.Background())
	defer cancel()
	for _, o := range orphans {
		if err := o.leave(ctx); err != nil {
			p.c.log.Error("redisync: leaving a lock's queue on close failed", "key", o.keys.waiters, "err", err)
		}
	}
}

func (p *presence) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	p.mu.Lock()
	p.useTimer(timer)
	p.mu.Unlock()
	defer func() {
		// Stopped: join and checkBy no longer move the timer.
		p.mu.Lock()
		p.awake()
		p.pace = 0
		p.mu.Unlock()
	}()
	var nextPass time.Time
	for {
		p.mu.Lock()
		p.awake() // join and checkBy kick
		p.pace = 0
		p.mu.Unlock()
		period, check, ok := p.schedule()
		if !ok {
			nextPass = time.Time{}
			period = time.Hour // idle until the next join
		} else if next := time.Now().Add(period); nextPass.IsZero() || next.Before(nextPass) {
			// A lock joined with a shorter waiter expiry brings the pass
			// forward: its deadline must not lapse at the old pace.
			nextPass = next
		}
		wake := nextPass
		if wake.IsZero() {
			wake = time.Now().Add(period)
		}
		if !check.IsZero() && check.Before(wake) {
			wake = check
		}
		p.mu.Lock()
		p.sleepFor(max(time.Until(wake), time.Millisecond))
		if ok {
			// nextPass is at most a period from when it was set, a pass
			// or a schedule, both before now (see join).
			p.pace = period
		}
		p.mu.Unlock()
		select {
		case <-p.stop:
			return
		case <-p.kick:
			continue
		case <-timer.C:
		}
		// Held for the whole pass: a test that takes stall knows that no
		// pass writes to Redis until it lets go.
		p.stall.Lock()
		now := time.Now()
		if ok && !now.Before(nextPass) {
			p.pass(period)
			p.probe(period)
			nextPass = now.Add(period)
		}
		p.check(now, period)
		p.stall.Unlock()
	}
}

// follow has the loop run for subscriptions followed by probes (see
// subscription.follow): it runs while any has waiters.
func (p *presence) follow() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.startOrWake(p.run)
}

// schedule returns the time between passes (presenceRead, or a third of
// the shortest waiter expiry if shorter) and the soonest check; ok is false
// when nothing is waited for.
func (p *presence) schedule() (period time.Duration, check time.Time, ok bool) {
	followed := p.c.notify.following()
	p.mu.Lock()
	defer p.mu.Unlock()
	if followed {
		period, ok = presenceRead, true
	}
	for _, e := range p.locks {
		if every := presencePeriod(e.expiry); !ok || every < period {
			period, ok = every, true
		}
		if !e.checkAt.IsZero() && (check.IsZero() || e.checkAt.Before(check)) {
			check = e.checkAt
		}
	}
	if !ok && len(p.orphans) > 0 {
		period, ok = renewRetry, true
	}
	return max(period, time.Millisecond), check, ok
}

// check reads the keys of the locks whose check is due, in one pipeline:
// every local waiter of a lock found free looks again, and the next check
// comes when the holder's lease runs out.
func (p *presence) check(now time.Time, timeout time.Duration) {
	p.mu.Lock()
	var due []lockKeys
	for _, e := range p.locks {
		if !e.checkAt.IsZero() && !now.Before(e.checkAt) {
			e.checkAt = time.Time{}
			due = append(due, e.keys)
		}
	}
	p.mu.Unlock()
	if len(due) == 0 {
		return
	}
	// Read as Inspect reads a lock: a free lock keeps its hash (and a TTL).
	batch := make([]rueidis.LuaExec, len(due))
	for i, keys := range due {
		batch[i] = inspectExec(keys)
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, 100*time.Millisecond))
	defer cancel()
	for i, r := range inspectScript.batch(ctx, p.c.rc, batch) {
		st, err := mutexState(r)
		if err != nil {
			// Look again soon; waiters also look again once resubscribed.
			p.checkBy(due[i].waiters, time.Now().Add(renewRetry))
			continue
		}
		pttl := int64(-2)
		if st.Locked {
			pttl = st.TTL.Milliseconds()
		}
		p.found(due[i], pttl, false, "")
	}
}

// samePTTL is the PTTL a pass reports for a lock held by the holder it
// read at the previous pass: the check set then stands. A holder that
// renewed or extended its lease is found held at the check, which looks
// again at the new end; one whose lease was shortened (an Extend shorter
// than what was left) and that died is found at the end first read.
const samePTTL = -3

// heldBy notes the holder a pass read with its PTTL (empty for none): the next
// pass reads no PTTL while it holds the lock.
func (p *presence) heldBy(keys lockKeys, owner string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.locks[keys.waiters]; e != nil {
		e.holder = owner
	}
}

// found acts on what a check or a pass read of a lock: its key's PTTL,
// whether places of the Client there may be gone, and the holder when it
// is of this Client (mine). A holder of this Client may be a waiter that a
// release handed the lock to and whose message was lost: that waiter looks
// again, and finds the lock its own. When the lock may be free or places
// may be gone, every local waiter looks again, and the lock is checked
// again a waiter expiry later in case nobody takes it; otherwise it is
// checked when the holder's lease runs out.
func (p *presence) found(keys lockKeys, pttl int64, gone bool, mine string) {
	channel := waiterChannel(keys.channel, p.c.id)
	if mine != "" {
		p.c.notify.wake(channel, mine)
	}
	if !gone && pttl == samePTTL {
		return // its check stands
	}
	if !gone && pttl != -2 {
		p.watch(keys, pttl)
		return
	}
	p.c.notify.wakeAll(channel)
	p.mu.Lock()
	e := p.locks[keys.waiters]
	var expiry time.Duration
	if e != nil {
		expiry = e.expiry
	}
	p.mu.Unlock()
	if e != nil {
		p.checkBy(keys.waiters, time.Now().Add(expiry))
	}
}

// pass renews the Client's deadline on every lock it has waiters on, and
// retries the leaves that failed. Waiters of a lock where the Client had
// no deadline any more look again, and so do those of a lock found free;
// the others look when its lease runs out. That is how a Client learns
// that the lock went to a waiter of another Client that died before
// taking it: a release names a waiter to its own Client only.
//
// A Client without client-side caching renews in one script per slot and
// renewBatch locks, all in one pipeline, which also reads each lock. One
// with it (LossDetection DetectOnChange) renews with a plain HSET per lock,
// pipelined, whose deadline it computes from the server's clock as last
// measured (serverClock), and reads each lock from its client-side cache:
// Redis tells it when the lock changes, so a lock nobody touched costs no
// command at all (see renewPlain).
func (p *presence) pass(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, 100*time.Millisecond))
	defer cancel()
	now := time.Now()
	var clock serverClock
	if p.c.tracker.on {
		clock = p.serverClock(ctx, now)
	}
	scripted, plain, read, orphans := p.renewals(now, timeout, clock)
	p.renewScripted(ctx, scripted)
	p.renewPlain(ctx, plain, read)
	for _, o := range orphans {
		if err := o.leave(ctx); err != nil {
			o.tries++
			p.mu.Lock()
			if _, waited := p.locks[o.keys.waiters]; waited || o.tries < orphanTries {
				p.orphans = append(p.orphans, o)
			}
			p.mu.Unlock()
		}
	}
}

// renewal is one lock's renewal at a pass.
type renewal struct {
	keys   lockKeys
	expiry time.Duration
	// touch is "1" to refresh the keys' expiry as well, "2" (scripts only)
	// when the Client's own HSET has just written its fields there anew,
	// "0" otherwise.
	touch string
	// holder is the owner id of the holder read last, while its check is
	// pending: a check done, or moved by anything else, reads the PTTL
	// again.
	holder string
	// deadline is the Client's new deadline there (server ms), for a
	// plain renewal.
	deadline int64
}

// renewScripted renews rs in the presence script, and acts on what it read
// of each lock.
func (p *presence) renewScripted(ctx context.Context, rs []renewal) {
	if len(rs) == 0 {
		return
	}
	batch, entries := p.scripts(rs)
	for i, r := range presenceScript.batch(ctx, p.c.rc, batch) {
		gone, pttl, mine, owners, err := presenceReply(r, len(entries[i]))
		if err != nil {
			// The script may have run, and written the Client's fields
			// anew where a release had dropped its places: the next pass
			// takes them for gone (repair).
			for _, x := range entries[i] {
				p.repair(x)
			}
			continue
		}
		for j, x := range entries[i] {
			if pttl[j] != samePTTL {
				p.heldBy(x.keys, owners[j])
			}
			p.found(x.keys, pttl[j], gone[j] == 1, mine[j])
		}
	}
}

// renewPlain renews rs, the locks of a Client with client-side caching,
// without a script: one HSET per lock of the Client's deadline and of the
// field that tells it its places are whole, with the keys' expiry
// refreshed by PEXPIRE now and then, all in one pipeline. An HSET that
// added a field found the places of the Client there gone (or the hash
// gone): its waiters look again, and the script, run for that lock at
// once (touch "2"), drops the hash if nobody waits or gives it its
// expiry. The other locks, and those of read (whose renewal is not due),
// are read from the client-side cache (readLocks).
func (p *presence) renewPlain(ctx context.Context, rs, read []renewal) {
	if len(rs) == 0 {
		p.readLocks(ctx, read)
		return
	}
	cmds := make(rueidis.Commands, 0, len(rs))
	at := make([]int, len(rs)) // index of each lock's HSET in cmds
	field, alive := "\x00c"+p.c.id, "\x00a"+p.c.id
	for i, x := range rs {
		at[i] = len(cmds)
		cmds = append(cmds, p.c.rc.B().Hset().Key(x.keys.waiters).FieldValue().
			FieldValue(field, strconv.FormatInt(x.deadline, 10)).FieldValue(alive, "").Build())
		if x.touch == "1" {
			keep := queueKeep * x.expiry.Milliseconds()
			cmds = append(cmds,
				p.c.rc.B().Pexpire().Key(x.keys.waiters).Milliseconds(keep).Build(),
				p.c.rc.B().Pexpire().Key(x.keys.queue).Milliseconds(keep).Build())
		}
	}
	res := p.c.rc.DoMulti(ctx, cmds...)
	var repairs []renewal
	for i, x := range rs {
		added, err := res[at[i]].AsInt64()
		switch {
		case err != nil:
			// The HSET may have run, and written the Client's fields anew
			// where a release had dropped its places, or made a hash
			// without expiry: the next pass takes them for gone, in the
			// script (repair). The lock is read all the same.
			p.repair(x)
			read = append(read, x)
		case added > 0:
			x.touch = "2"
			repairs = append(repairs, x)
		default:
			read = append(read, x)
		}
	}
	p.renewScripted(ctx, repairs)
	p.readLocks(ctx, read)
}

// probe reads, in one pipeline, the probe of every subscription followed
// (see subscription.follow), and wakes the waiters of those found free or
// changed since the previous pass.
func (p *presence) probe(timeout time.Duration) {
	subs := p.c.notify.followed()
	if len(subs) == 0 {
		return
	}
	cmds := make(rueidis.Commands, len(subs))
	for i, s := range subs {
		cmds[i] = s.probe(p.c.rc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, 100*time.Millisecond))
	defer cancel()
	for i, r := range p.c.rc.DoMulti(ctx, cmds...) {
		v, err := r.ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			continue // the waiters look again once resubscribed, or at the next pass
		}
		if subs[i].probedAs(v) {
			subs[i].wakeAll()
		}
	}
}

// presenceReply reads the reply of the presence script for n locks.
func presenceReply(r rueidis.RedisResult, n int) (gone, pttl []int64, mine, owners []string, err error) {
	v, err := r.ToArray()
	if err == nil && len(v) != 4 {
		err = fmt.Errorf("redisync: presence script replied with %d arrays, not 4", len(v))
	}
	if err == nil {
		if gone, err = v[0].AsIntSlice(); err == nil {
			if pttl, err = v[1].AsIntSlice(); err == nil {
				if mine, err = v[2].AsStrSlice(); err == nil {
					owners, err = v[3].AsStrSlice()
				}
			}
		}
	}
	if err == nil && (len(gone) != n || len(pttl) != n || len(mine) != n || len(owners) != n) {
		err = fmt.Errorf("redisync: presence script replied for %d, %d, %d and %d locks, not %d", len(gone), len(pttl), len(mine), len(owners), n)
	}
	return gone, pttl, mine, owners, err
}

// readLocks reads the holder of each of rs's locks from the Client's
// client-side cache, and acts on it as on the presence script's reads. A
// cached reply stands while Redis has not told the Client that the key
// changed: Redis sends that invalidation on the connection that read the
// key, so it is lost only with that connection, and rueidis drops what
// the connection read when it breaks: the next read asks Redis again. A
// reply from Redis is read for the holder's PTTL too, when the holder is
// not the one read last; a cached one names that holder, whose check
// stands.
func (p *presence) readLocks(ctx context.Context, rs []renewal) {
	if len(rs) == 0 {
		return
	}
	cmds := make([]rueidis.CacheableTTL, len(rs))
	for i, x := range rs {
		// Pinned: rueidis recycles the commands of a DoMultiCache call that
		// failed while its connection may still be writing them.
		cmd := p.c.rc.B().Hmget().Key(x.keys.lock).Field("owner", "token").Cache().ToStaticTTL().Pin()
		cmds[i] = rueidis.CT(cmd, trackCacheTTL)
	}
	type held struct {
		x     renewal
		owner string
	}
	var fresh []held
	for i, r := range p.c.rc.DoMultiCache(ctx, cmds...) {
		x := rs[i]
		owner, err := lockOwner(r)
		switch {
		case err != nil && !isRedisReply(err):
			continue // the places expire; the waiters look again once resubscribed
		case err != nil || owner == "":
			// Free, or a key that is no lock: the waiters look again, and
			// an attempt reports what it is.
			p.heldBy(x.keys, "")
			p.found(x.keys, -2, false, "")
		case owner == x.holder:
			p.found(x.keys, samePTTL, false, p.mine(owner))
		default:
			fresh = append(fresh, held{x, owner})
		}
	}
	if len(fresh) == 0 {
		return
	}
	pttls := make(rueidis.Commands, len(fresh))
	for i, h := range fresh {
		pttls[i] = p.c.rc.B().Pttl().Key(h.x.keys.lock).Build()
	}
	for i, r := range p.c.rc.DoMulti(ctx, pttls...) {
		h := fresh[i]
		pttl, err := r.AsInt64()
		if err != nil {
			// The holder is not recorded: the next pass reads its PTTL.
			continue
		}
		p.heldBy(h.x.keys, h.owner)
		p.found(h.x.keys, pttl, false, p.mine(h.owner))
	}
}

// lockOwner reads the owner from the reply of HMGET owner token on a lock's
// key: "" when the lock is free or its key is gone or no lock.
func lockOwner(r rueidis.RedisResult) (string, error) {
	v, err := r.ToArray()
	if err != nil {
		return "", err
	}
	if len(v) != 2 || v[1].IsNil() {
		return "", nil
	}
	owner, err := v[0].ToString()
	if rueidis.IsRedisNil(err) {
		return "", nil
	}
	return owner, err
}

// mine is owner when it is the owner id of a waiter of this Client, ""
// otherwise.
func (p *presence) mine(owner string) string {
	if owner != "" && clientIDOf(owner) == p.c.id {
		return owner
	}
	return ""
}

// repair has the next pass renew the lock of x in the script as if the
// Client's own HSET had just written its fields there anew (touch "2"): a
// renewal whose reply did not come may have done so, and what it would
// have said, that places of the Client were gone, is not lost: the
// Client's waiters there look again.
//
// It may also have made the waiters hash anew, without expiry, where the
// last waiter of the lock had left or been handed the lock after the pass
// gathered its renewals (the queue's end drops the hash): a lock nobody of
// the Client waits on any more is repaired all the same, as an orphan
// leave (settleHash), or the hash would outlive every queue.
func (p *presence) repair(x renewal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.locks[x.keys.waiters]; e != nil {
		e.repair = true
		return
	}
	p.orphans = append(p.orphans, p.settleHash(x.keys, x.expiry))
	p.startOrWake(p.run)
}

// settleHash is the leave, retried at the next passes as an orphan's, of
// the Client's fields in the waiters hash of a lock it no longer waits on,
// which a renewal may have written anew, making the hash anew without
// expiry: the presence script, run as for a repair (touch "2"), drops the
// hash if nobody waits there, or gives it its expiry. A lock the Client
// waits on again by then is repaired as such (repair): the pass's script
// then tells its waiters that their places may be gone, which the
// settling, whose answer nobody reads, would hide from them.
func (p *presence) settleHash(keys lockKeys, expiry time.Duration) orphanLeave {
	return orphanLeave{keys: keys, leave: func(ctx context.Context) error {
		p.mu.Lock()
		e := p.locks[keys.waiters]
		if e != nil {
			e.repair = true
		}
		p.mu.Unlock()
		if e != nil {
			return nil
		}
		batch, _ := p.scripts([]renewal{{keys: keys, expiry: expiry, touch: "2"}})
		return presenceScript.exec(ctx, p.c.rc, batch[0].Keys, batch[0].Args).Error()
	}}
}

// serverClock is the server's clock (ms) as read at the instant at, with
// at taken before the request was sent: ms plus the time since at is never
// behind the clock of a server that answered (see presence.serverClock).
type serverClock struct {
	ms int64
	at time.Time
}

// now is the server's clock at t as c estimates it, rounded up.
func (c serverClock) now(t time.Time) int64 {
	return c.ms + int64((t.Sub(c.at)+time.Millisecond-1)/time.Millisecond)
}

// serverClock returns the server clock that plain renewals compute the
// Client's deadlines from, measuring it again (TIME on every node the
// Client knows) once it is as old as the keys' expiry
// refreshes (touchEvery waiter expiries of the shortest). The zero
// serverClock, when no node answered, has the pass renew in the script,
// which reads the server's clock itself.
//
// The deadline must not come before the one the script would write,
// server time plus the waiter expiry, or the Client's places would lapse
// while it is alive; a deadline after it only delays the skipping of a
// dead Client's places. So the clock kept is an upper bound: the greatest
// of the nodes' answers, each counted from before its request left (a
// request's round trip and the skew between nodes add to it, a few ms);
// the Client's elapsed time comes from its monotonic clock, never its wall
// clock. A server whose clock steps back makes the deadlines later by the
// step until the next measure; one that steps forward, sooner, and if by
// more than the two thirds of the expiry that a renewal leaves, the
// places lapse once and the next renewal finds them gone (as after a
// Client lapse): its waiters queue again.
func (p *presence) serverClock(ctx context.Context, now time.Time) serverClock {
	p.mu.Lock()
	clock, shortest := p.clock, time.Duration(0)
	for _, e := range p.locks {
		if shortest == 0 || e.expiry < shortest {
			shortest = e.expiry
		}
	}
	p.mu.Unlock()
	if shortest == 0 || (!clock.at.IsZero() && now.Sub(clock.at) < touchEvery*shortest) {
		return clock
	}
	// One node after the other, each read counted from the instant before
	// its own request left: the greatest estimate is kept (its ms less its
	// instant), and no goroutine is started for it.
	var best serverClock
	for _, n := range p.c.rc.Nodes() {
		at := time.Now()
		t, err := n.Do(ctx, n.B().Time().Build()).AsStrSlice()
		if err != nil || len(t) != 2 {
			continue
		}
		s, err1 := strconv.ParseInt(t[0], 10, 64)
		us, err2 := strconv.ParseInt(t[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		c := serverClock{ms: s*1000 + (us+999)/1000, at: at}
		if best.at.IsZero() || c.now(best.at) > best.ms {
			best = c
		}
	}
	if best.at.IsZero() {
		return clock // the old one, if any: elapsed time still counts from it
	}
	clock = best
	p.mu.Lock()
	p.clock = clock
	p.mu.Unlock()
	return clock
}

// presenceRead is the longest time between passes: how long a waiter may
// go without learning that the lock is free or handed to it, whatever
// messages were lost. A pass renews the Client's deadline on a lock only
// every third of its waiter expiry (renewalDue); a Client with client-side
// caching reads the lock at every pass at no cost while it is unchanged.
const presenceRead = time.Second

// renewalDue reports whether a pass at now, the next one period later, renews
// the deadline that the renewal at renewed set: the renewals come a third
// of the expiry apart, give or take half a period, leaving two thirds of
// it, less that half, before the deadline.
func renewalDue(now, renewed time.Time, expiry, period time.Duration) bool {
	return !now.Add(period / 2).Before(renewed.Add(expiry / 3))
}

// touchEvery is how often, in waiter expiries, a pass refreshes the
// expiry of the keys of a lock's queue, which live queueKeep waiter
// expiries.
const touchEvery = 3

// queueKeep is queue_keep of lock_queue.lua: how long a queue outlives
// its Clients' renewals, in waiter expiries.
const queueKeep = 10

// renewals lists a pass's renewals, and takes the failed leaves to retry.
// A Client without client-side caching renews every lock in the script at
// every pass (scripted), which reads the lock too; one with it, each lock
// whose renewal is due (see renewalDue) in a plain HSET (plain) once it has a
// server clock, and in the script the locks whose last renewal may have
// written its fields anew unbeknown to it (repair); the locks whose
// renewal is not due are only read, from its client-side cache (read).
func (p *presence) renewals(now time.Time, period time.Duration, clock serverClock) (scripted, plain, read []renewal, orphans []orphanLeave) {
	p.mu.Lock()
	defer p.mu.Unlock()
	orphans, p.orphans = p.orphans, nil
	for _, e := range p.locks {
		x := renewal{keys: e.keys, expiry: e.expiry, touch: "0"}
		if !e.checkAt.IsZero() {
			x.holder = e.holder
		}
		cached := !clock.at.IsZero()
		if cached && !e.repair && !renewalDue(now, e.renewed, e.expiry, period) {
			read = append(read, x)
			continue
		}
		e.renewed = now
		if now.Sub(e.touched) >= touchEvery*e.expiry {
			x.touch, e.touched = "1", now
		}
		switch {
		case e.repair:
			e.repair = false
			x.touch = "2"
			scripted = append(scripted, x)
		case cached:
			x.deadline = clock.now(now) + e.expiry.Milliseconds()
			plain = append(plain, x)
		default:
			scripted = append(scripted, x)
		}
	}
	return scripted, plain, read, orphans
}

// scripts builds the presence scripts of rs: one per slot and renewBatch
// locks, with the renewals each covers.
func (p *presence) scripts(rs []renewal) (batch []rueidis.LuaExec, entries [][]renewal) {
	slots := make(map[uint16][]renewal)
	for _, x := range rs {
		var slot uint16
		if p.c.cluster {
			slot = slotHash(x.keys.waiters)
		}
		slots[slot] = append(slots[slot], x)
	}
	for _, xs := range slots {
		for len(xs) > 0 {
			chunk := xs[:min(len(xs), renewBatch)]
			xs = xs[len(chunk):]
			b := rueidis.LuaExec{Keys: make([]string, 0, 3*len(chunk)), Args: make([]string, 1, 1+3*len(chunk))}
			b.Args[0] = p.c.id
			for _, x := range chunk {
				b.Keys = append(b.Keys, x.keys.waiters, x.keys.queue, x.keys.lock)
				b.Args = append(b.Args, strconv.FormatInt(x.expiry.Milliseconds(), 10), x.touch, x.holder)
			}
			batch = append(batch, b)
			entries = append(entries, chunk)
		}
	}
	return batch, entries
}
