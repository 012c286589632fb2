package redisync

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// lateMessages is a dedicated actor of schedule n: two Clients of its own
// (a plain one, and one behind fault proxies whose replies it holds back,
// made with New and DetectChanges) and a random source of its own, so
// that the schedule's other choices stay those of its seed. Until stop,
// it brings in turn what takes two things late at once on one Client,
// which the schedule's faults, one random fault at a time, rarely line
// up:
//   - lateGrant: an acquisition whose reply comes after its lease ran
//     out and another Client took the lock;
//   - lateRelease: a release, just before the timer of a Group that waits
//     for it, whose message comes just after that timer;
//   - staleHandOver: a hand-over's message for a waiter's place, with a
//     token no higher than the one its last attempt saw, comes after that
//     attempt (as one that lapsed unclaimed, the lock taken since, would);
//   - orphanPlace: the leave of a waiter that gave up fails, at its
//     Client's presence passes too, while another waiter of the Client
//     waits on the lock.
//
// Its checks excuse what a restart or a failover of the servers, which
// drop writes, did meanwhile. The schedule ends at end (or stop).
func (w *world) lateMessages(seed uint64, n int, end time.Time, stop <-chan struct{}, wg *sync.WaitGroup) {
	rnd := rand.New(rand.NewPCG(seed, 0x1a7e))
	lease := time.Duration(500+rnd.IntN(300)) * time.Millisecond
	var fell atomic.Int64
	holder, err := Dial(rueidis.ClientOption{InitAddress: w.e.addrs}, WithPrefix("late"), WithLogger(quietLogger()))
	if err != nil {
		w.t.Fatalf("schedule %d: making the late messages' holder: %v", n, err)
	}
	ps, err := newProxySet(w.e.addrs)
	if err != nil {
		holder.Close()
		w.t.Fatalf("schedule %d: proxies of the late messages' waiter: %v", n, err)
	}
	opt := ps.option(w.e.addrs)
	metrics := Metrics{WaitFallback: func(prim, _ string) {
		if prim == groupPrimitive { // the waits of lateRelease
			fell.Add(1)
		}
	}}
	var rc rueidis.Client
	var rf *replyFaults
	var waiter *Client
	detect := DetectChanges(&opt) // before the client is made from opt
	if rc, err = rueidis.NewClient(opt); err == nil {
		rf = withReplyFaults(rc)
		waiter, err = New(rf, WithPrefix("late"), WithLogger(quietLogger()), WithWatchdogLease(lease), WithMetrics(metrics), detect)
		if err != nil {
			rc.Close()
		}
	}
	if err != nil {
		holder.Close()
		ps.Close()
		w.t.Fatalf("schedule %d: making the late messages' waiter: %v", n, err)
	}
	lc := lateClients{holder: holder, waiter: waiter, rf: rf, ps: ps, fell: &fell, lease: lease}
	// Until stop: late grants, late releases and stale hand-overs in
	// turn, and beside them (on names of their own, the waiter's leaves
	// refused on those alone), orphan places; none begins that would not
	// end, as a rule, before the schedule's end, so that it does not hold
	// the schedule up.
	var both sync.WaitGroup
	both.Add(2)
	go func() {
		defer both.Done()
		for i := 0; !latchOpen(stop); i++ {
			name := fmt.Sprintf("{s%d:%d}", n, i)
			switch i % 3 {
			case 0:
				if time.Until(end) < 4*lease {
					return
				}
				w.lateGrant(rnd, lc, name)
			case 1:
				if time.Until(end) < 1500*time.Millisecond {
					return
				}
				w.lateRelease(rnd, lc, name)
			default:
				w.staleHandOver(rnd, lc, name)
			}
		}
	}()
	go func() {
		defer both.Done()
		for i := 0; !latchOpen(stop) && time.Until(end) > 3*time.Second; i++ {
			w.orphanPlace(lc, fmt.Sprintf("{s%d:o%d}", n, i))
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		both.Wait()
		rf.clear()
		ps.Heal()
		waiter.Close()
		rc.Close()
		ps.Close()
		holder.Close()
	}()
}

// lateClients are the Clients of lateMessages: holder a plain one, waiter
// one behind the fault proxies ps, whose replies rf holds back, with the
// watchdog lease lease, whose lost wake-ups fell counts.
type lateClients struct {
	holder, waiter *Client
	rf             *replyFaults
	ps             proxySet
	fell           *atomic.Int64
	lease          time.Duration
}

// serverFaulted reports whether a fault of the schedule that acts on the
// servers themselves (a restart, a failover: both may drop writes, and
// stall every Client) acted between from and to: the checks of
// lateMessages, whose Clients the other faults do not touch, excuse it.
func (w *world) serverFaulted(from, to time.Time) bool {
	return w.faulted(-1, from, to, "restart", "failover")
}

// lateGrant: the waiter's acquisition runs in Redis and its reply is held
// back for three leases; its key expires meanwhile, and the holder takes
// the lock and keeps it. The grant, come late, must not be delivered: it
// is confirmed by a renewal first, which finds the lock the holder's.
func (w *world) lateGrant(rnd *rand.Rand, lc lateClients, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	began := time.Now()
	opts := []LockOption{WithLocalPasses(0, 0)}
	fixed := rnd.IntN(2) == 0
	if fixed {
		opts = append(opts, WithFixedLease(lc.lease))
	}
	r := lc.rf.hold(runsWith(acquireScript, lc.waiter.keysFor(name).lock), 1, 3*lc.lease)
	defer lc.rf.drop(r)
	got := make(chan *Lease, 1)
	go func() {
		lctx, cancel := context.WithTimeout(ctx, 6*lc.lease)
		defer cancel()
		l, err := lc.waiter.Mutex(name, opts...).Lock(lctx)
		if err != nil {
			l = nil
		}
		got <- l
	}()
	select {
	case <-r.Ran():
	case l := <-got:
		// The acquisition ended before its script ran (its deadline, the
		// connection): nothing came late.
		if l != nil {
			_ = l.Unlock(ctx)
		}
		return
	}
	w.count(w.attempts, "late grant: the acquisition's reply held back while another Client takes the lock")
	ol, err := lc.holder.Mutex(name, WithLocalPasses(0, 0)).Lock(ctx)
	l := <-got
	if err == nil {
		if l != nil && ol.Err() == nil && !w.serverFaulted(began, time.Now()) {
			w.violation("late-grant-delivered", "%q: a grant whose reply came %v late (fixed lease %v) was delivered (Err %v) while another Client holds the lock (token %d, the late grant's %d)",
				name, 3*lc.lease, fixed, l.Err(), ol.Token(), l.Token())
		}
		_ = ol.Unlock(ctx)
	}
	if l != nil {
		_ = l.Unlock(ctx)
	}
}

// lateRelease: the waiter's Group waits for a lock that the holder took
// with a fixed lease, so the Group's timer is set for the lease's end;
// the holder releases just before it, and the waiter's messages are
// delayed a little more than that: the release's message comes just
// after the timer. It came late, not lost (within messageGrace): the
// Group gets the locks at once, and no lost wake-up is counted.
func (w *world) lateRelease(rnd *rand.Rand, lc lateClients, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	began := time.Now()
	a, b := name+":a", name+":b"
	rc := lc.holder.rc
	keys := lc.holder.keysFor(a)
	l, err := lc.holder.Mutex(a, WithFixedLease(800*time.Millisecond)).Lock(ctx)
	if err != nil {
		return
	}
	type outcome struct {
		l   *Lease
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		gl, err := NewGroup(lc.waiter.Mutex(a), lc.waiter.Mutex(b)).Lock(ctx)
		done <- outcome{gl, err}
	}()
	unlockGroup := func(o outcome) {
		if o.err == nil {
			_ = o.l.Unlock(ctx)
		}
	}
	for queued := false; !queued; {
		n, err := rc.Do(ctx, rc.B().Zcard().Key(keys.queue).Build()).AsInt64()
		queued = err == nil && n == 1
		if !queued {
			if time.Since(began) > 3*time.Second {
				_ = l.Unlock(ctx)
				unlockGroup(<-done)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	time.Sleep(200 * time.Millisecond) // the Group's subscription in effect, its timer set
	early := time.Duration(10+rnd.IntN(20)) * time.Millisecond
	delay := early + 20*time.Millisecond
	pttl, err := rc.Do(ctx, rc.B().Pttl().Key(keys.lock).Build()).AsInt64()
	if err != nil || time.Duration(pttl)*time.Millisecond <= early {
		_ = l.Unlock(ctx)
		unlockGroup(<-done)
		return
	}
	lc.ps.DelayPushes(delay)
	defer lc.ps.DelayPushes(0)
	w.count(w.attempts, "late release: the message of a release just before a Group's timer comes just after it")
	before := lc.fell.Load()
	time.Sleep(time.Duration(pttl)*time.Millisecond - early)
	unlockErr := l.Unlock(ctx)
	released := time.Now()
	var o outcome
	select {
	case o = <-done:
	case <-time.After(5 * time.Second):
		o = <-done
	}
	took := time.Since(released)
	unlockGroup(o)
	time.Sleep(2 * messageGrace) // a lost wake-up would be counted by then
	if unlockErr == nil && lc.fell.Load() > before && !w.serverFaulted(began, time.Now()) {
		w.violation("lost-wakeup-counted", "%q: a Group's wait ended by its timer %v before a release's message came (delayed %v) was counted as a lost wake-up (the Group got the locks %v after the release: %v)",
			name, early, delay, took.Round(time.Millisecond), o.err)
	}
}

// orphanPlace: two waiters of the waiter Client queue on a lock the holder
// holds; the first gives up, and its leave is refused, at the Client's
// presence passes too, more times than a leave is retried when the
// Client has no other waiter there (orphanTries). The second still
// waits, so the deadline the Client renews keeps the first one's place
// alive: its leave must be retried until it succeeds, once it is no
// longer refused, or the release would hand the lock to a waiter that is
// gone. The place must leave the queue within a few passes.
func (w *world) orphanPlace(lc lateClients, name string) {
	const expiry = 1500 * time.Millisecond // a presence pass every 500ms
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	began := time.Now()
	rc := lc.holder.rc
	keys := lc.waiter.keysFor(name)
	l, err := lc.holder.Mutex(name).Lock(ctx)
	if err != nil {
		return
	}
	unlocked := false
	defer func() {
		if !unlocked {
			_ = l.Unlock(ctx)
		}
	}()
	queued := func(n int64) bool {
		for start := time.Now(); time.Since(start) < 3*time.Second; time.Sleep(5 * time.Millisecond) {
			if got, err := rc.Do(ctx, rc.B().Zcard().Key(keys.queue).Build()).AsInt64(); err == nil && got == n {
				return true
			}
		}
		return false
	}
	gone, giveUp := context.WithCancel(ctx)
	defer giveUp()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		if gl, err := lc.waiter.Mutex(name, WithWaiterExpiry(expiry), WithLocalPasses(0, 0)).Lock(gone); err == nil {
			_ = gl.Unlock(ctx)
		}
	}()
	type outcome struct {
		l   *Lease
		err error
		at  time.Time
	}
	live := make(chan outcome, 1)
	liveCtx, stopLive := context.WithCancel(ctx)
	defer stopLive()
	if !queued(1) {
		giveUp()
		<-ended
		return
	}
	go func() {
		ll, err := lc.waiter.Mutex(name, WithWaiterExpiry(expiry), WithLocalPasses(0, 0)).Lock(liveCtx)
		live <- outcome{ll, err, time.Now()}
	}()
	defer func() {
		if !unlocked {
			stopLive()
		}
		var o outcome
		select {
		case o = <-live:
		case <-time.After(3 * time.Second): // the live waiter gets the lock at the release
			stopLive()
			o = <-live
		}
		if o.err == nil {
			_ = o.l.Unlock(ctx)
		}
	}()
	if !queued(2) {
		giveUp()
		<-ended
		return
	}
	r := lc.rf.refuse(runsWith(leaveScript, keys.queue), -1)
	giveUp()
	<-ended
	w.count(w.attempts, "orphan place: the leave of a waiter that gave up refused while another waiter of its Client waits")
	// Refused past the retries a Client without another waiter makes.
	for start := time.Now(); r.Hits() <= orphanTries && time.Since(start) < (orphanTries+3)*expiry/3; {
		time.Sleep(20 * time.Millisecond)
	}
	lc.rf.drop(r)
	healed := time.Now()
	if !queued(1) && !w.serverFaulted(began, time.Now()) {
		w.violation("orphan-place-kept", "%q: the place of a waiter that gave up is still in the queue %v after its leave was no longer refused (refused %d times), while another waiter of its Client waits",
			name, time.Since(healed).Round(time.Millisecond), r.Hits())
	}
	unlocked = l.Unlock(ctx) == nil
}

// staleHandOver: the waiter queues on a lock the holder holds; then a
// hand-over message for its place comes, with the token its last attempt
// saw or the one below: the message of a hand-over that came late, the
// lock having moved on since (its hand-over lapsed unclaimed, and another
// Client took the lock, which the attempt saw). It must not be delivered
// as the lock while the holder holds it: the waiter asks Redis again.
func (w *world) staleHandOver(rnd *rand.Rand, lc lateClients, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	began := time.Now()
	rc := lc.holder.rc
	keys := lc.holder.keysFor(name)
	l, err := lc.holder.Mutex(name, WithLocalPasses(0, 0)).Lock(ctx)
	if err != nil {
		return
	}
	type outcome struct {
		l   *Lease
		err error
	}
	wctx, stopWaiter := context.WithCancel(ctx)
	defer stopWaiter()
	done := make(chan outcome, 1)
	go func() {
		wl, err := lc.waiter.Mutex(name, WithLocalPasses(0, 0)).Lock(wctx)
		done <- outcome{wl, err}
	}()
	var place string
	for place == "" && time.Since(began) < 3*time.Second {
		if ids, err := rc.Do(ctx, rc.B().Zrange().Key(keys.queue).Min("0").Max("0").Build()).AsStrSlice(); err == nil && len(ids) == 1 {
			place = ids[0]
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}
	stale := l.Token() - uint64(rnd.IntN(2))
	msg := fmt.Sprintf("g:%s %d", place, stale)
	if now, err := rc.Do(ctx, rc.B().Time().Build()).AsStrSlice(); err == nil && rnd.IntN(2) == 0 {
		s, _ := strconv.ParseInt(now[0], 10, 64)
		us, _ := strconv.ParseInt(now[1], 10, 64)
		msg += fmt.Sprintf(" %d", s*1000+us/1000)
	}
	if place != "" && rc.Do(ctx, rc.B().Spublish().Channel(waiterChannel(keys.channel, lc.waiter.ID())).Message(msg).Build()).Error() == nil {
		w.count(w.attempts, "stale hand-over: a hand-over's message with a token the waiter's attempt saw comes after it")
		select {
		case o := <-done:
			if o.err == nil {
				if l.Err() == nil && !w.serverFaulted(began, time.Now()) {
					w.violation("stale-handover-delivered", "%q: a hand-over's message %q, whose token is not above the holder's (%d), was delivered as the lock (Err %v, token %d)",
						name, msg, l.Token(), o.l.Err(), o.l.Token())
				}
				_ = o.l.Unlock(ctx)
			}
			_ = l.Unlock(ctx)
			return
		case <-time.After(300 * time.Millisecond):
		}
	}
	_ = l.Unlock(ctx)
	select {
	case <-time.After(3 * time.Second):
		stopWaiter()
	case o := <-done:
		if o.err == nil {
			_ = o.l.Unlock(ctx)
		}
		return
	}
	if o := <-done; o.err == nil {
		_ = o.l.Unlock(ctx)
	}
}
