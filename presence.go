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
// latency, the presence pass is for liveness. Each pass (a third of the
// shortest waiter expiry, a second by default) reads, per lock and not per
// waiter, whether the Client's places there are whole, whether the lock is
// free, and whether it was handed to one of the Client's waiters; and for
// the waiters without a place in a queue (Groups and Quorums on a Mutex,
// Latch waiters, the waiters of the Redisson locks, whose queue, if any, is
// Redisson's) whether what they wait for became free or changed (follow):
// one command per channel followed, whatever the number of its waiters. A
// waiter's place is alive while its Client's deadline in the lock's
// waiters hash has not passed (see the prelude), and the Client renews
// that one deadline for all its waiters on the lock, every third of the
// waiter expiry, in batched scripts: what waiting costs grows with the
// Clients and the locks waited for, not with the waiting goroutines. A Client that dies stops renewing, and its places
// are passed over once its deadline has passed. One goroutine, started with
// the first waiter.
type presence struct {
	c *Client

	mu      sync.Mutex
	locks   map[string]*presenceEntry // by waiters key
	orphans []orphanLeave             // leaves that failed, retried at the next passes
	loop

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
// is gone: the leave is retried at every pass until it succeeds.
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
		e = &presenceEntry{keys: keys, expiry: expiry, touched: time.Now()}
		p.locks[keys.waiters] = e
	}
	e.expiry = min(e.expiry, expiry)
	e.waiters++
	p.startOrWake(p.run)
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
// renewed.
func (p *presence) leave(keys lockKeys) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.locks[keys.waiters]; e != nil {
		e.waiters--
		if e.waiters == 0 {
			delete(p.locks, keys.waiters)
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
	p.wake()
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

// close stops the loop.
func (p *presence) close() { p.end(&p.mu) }

func (p *presence) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var nextPass time.Time
	for {
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
		timer.Reset(max(time.Until(wake), time.Millisecond))
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

// schedule returns the time between passes (a third of the shortest waiter
// expiry) and the soonest check; ok is false when nothing is waited for.
func (p *presence) schedule() (period time.Duration, check time.Time, ok bool) {
	followed := p.c.notify.following()
	p.mu.Lock()
	defer p.mu.Unlock()
	if followed {
		period, ok = defaultWaiterExpiry/3, true
	}
	for _, e := range p.locks {
		if !ok || e.expiry/3 < period {
			period, ok = e.expiry/3, true
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

// pass renews the Client's deadline on every lock it has waiters on, in one
// script per slot and renewBatch locks, all in one pipeline, and retries the
// leaves that failed. Waiters of a lock where the Client had no deadline
// any more look again, and so do those of a lock found free; the others
// look when its lease runs out. That is how a Client learns that the lock
// went to a waiter of another Client that died before taking it: a release
// names a waiter to its own Client only.
func (p *presence) pass(timeout time.Duration) {
	batch, entries, orphans := p.batch(time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, 100*time.Millisecond))
	defer cancel()
	for i, r := range presenceScript.batch(ctx, p.c.rc, batch) {
		gone, pttl, mine, owners, err := presenceReply(r, len(entries[i]))
		if err != nil {
			continue // the places expire; the waiters look again once resubscribed
		}
		for j, keys := range entries[i] {
			if pttl[j] != samePTTL {
				p.heldBy(keys, owners[j])
			}
			p.found(keys, pttl[j], gone[j] == 1, mine[j])
		}
	}
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

// batch builds a pass's scripts (with the keys of their locks), and takes
// the failed leaves to retry.
func (p *presence) batch(now time.Time) (batch []rueidis.LuaExec, entries [][]lockKeys, orphans []orphanLeave) {
	p.mu.Lock()
	defer p.mu.Unlock()
	orphans, p.orphans = p.orphans, nil
	slots := make(map[uint16][]*presenceEntry)
	for _, e := range p.locks {
		var slot uint16
		if p.c.cluster {
			slot = slotHash(e.keys.waiters)
		}
		slots[slot] = append(slots[slot], e)
	}
	for _, es := range slots {
		for len(es) > 0 {
			chunk := es[:min(len(es), renewBatch)]
			es = es[len(chunk):]
			b := rueidis.LuaExec{Keys: make([]string, 0, 3*len(chunk)), Args: make([]string, 1, 1+3*len(chunk))}
			b.Args[0] = p.c.id
			ks := make([]lockKeys, len(chunk))
			for i, e := range chunk {
				touch := "0"
				if now.Sub(e.touched) >= 3*e.expiry {
					touch, e.touched = "1", now
				}
				b.Keys = append(b.Keys, e.keys.waiters, e.keys.queue, e.keys.lock)
				// The holder read last, while its check is pending: a
				// check done, or moved by anything else, reads the PTTL
				// again.
				holder := e.holder
				if e.checkAt.IsZero() {
					holder = ""
				}
				b.Args = append(b.Args, strconv.FormatInt(e.expiry.Milliseconds(), 10), touch, holder)
				ks[i] = e.keys
			}
			batch = append(batch, b)
			entries = append(entries, ks)
		}
	}
	return batch, entries, orphans
}
