package redisync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// heldReplies is a dedicated actor of schedule n, beside lateMessages:
// Clients of its own and a random source of its own, so that the
// schedule's other choices stay those of its seed. Until stop, it brings
// in turn what a reply held back, or a Client's lapse, does to one call
// while something else happens to its lock, which the schedule's faults,
// one random fault at a time, rarely line up:
//   - memberHangs: a Group over locks of two Clients, every reply on one
//     member's keys held back, whose context ends: the call returns
//     within its single grace (check past-grace);
//   - lapsedGrant: an acquisition with a fixed lease whose grant waits
//     while its Client lapses (its watchdog held up, as a pause of the
//     process holds it up), its key expiring and another Client taking
//     the lock meanwhile: the grant is not delivered (check
//     late-grant-delivered);
//   - leadAfterInvalidation: the acquisition that leads a cohort of local
//     waiters reserves a block of tokens, and its reply comes after the
//     lock was force-unlocked and taken by another Client: the block
//     passes nothing on (check pass-after-invalidation);
//   - keepAfterInvalidation: the keep of an Unlock with a local waiter
//     runs, and its reply comes after the lock was force-unlocked and
//     taken by another Client, while the Client's check of that change
//     is held up (its watchdog lapses while it reports another loss):
//     the keep passes nothing on (check pass-after-invalidation);
//   - renewedAfterLoss: the reply of the watchdog's renewals of one kind
//     of lock is held back while a lease of another kind, renewed in
//     another batch of the same pass, is force-unlocked and reported
//     lost: the pass does not renew it once the reply came (check
//     renewed-after-loss);
//   - extendedAtTheEnd: an Extend sent just before a fixed lease ends
//     runs in Redis, and its reply is held back until the lease ran out:
//     the lock does not stay held for nobody until the extension's end
//     (check extended-for-nobody);
//   - unlocksAtOnce: a lease and its re-entry, or a Group over its
//     Context, unlocked at once, the release that runs first with its
//     reply held back while the other frees the lock: the first lease is
//     released, not lost (check lost-while-released);
//   - heldAfterIdle, with no fault: a lock taken while its Client's
//     watchdog sleeps with nothing to watch, held for one and a half
//     watchdog leases, is renewed in time (check lost-after-idle).
//
// Its checks excuse what a restart or a failover of the servers did
// meanwhile. The schedule ends at end (or stop).
func (w *world) heldReplies(seed uint64, n int, end time.Time, stop <-chan struct{}, wg *sync.WaitGroup) {
	rnd := rand.New(rand.NewPCG(seed, 0x4e1d))
	hc, err := w.heldClients()
	if err != nil {
		w.t.Fatalf("schedule %d: making the held replies' Clients: %v", n, err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer hc.close()
		// None begins that would not end, as a rule, before the
		// schedule's end, so that it does not hold the schedule up.
		for i := 0; !latchOpen(stop) && time.Until(end) > 3*time.Second; i++ {
			name := fmt.Sprintf("s%d:h%d", n, i)
			switch (n + i) % 8 { // each schedule begins with another
			case 0:
				w.memberHangs(rnd, hc, name)
			case 1:
				w.lapsedGrant(rnd, hc, name)
			case 2:
				w.leadAfterInvalidation(rnd, hc, name)
			case 3:
				w.keepAfterInvalidation(rnd, hc, name)
			case 4:
				w.extendedAtTheEnd(rnd, hc, name)
			case 5:
				w.unlocksAtOnce(rnd, hc, name)
			case 6:
				w.heldAfterIdle(hc, name)
			default:
				w.renewedAfterLoss(hc, name)
			}
		}
	}()
}

// heldClients are the Clients of heldReplies: plain a plain one; faulty
// one made with New and DetectChanges over rc, whose replies rf holds
// back (and whose watchdog keepAfterInvalidation holds up); lapsing one
// of a short watchdog lease, whose watchdog lapsedGrant holds up; watched
// one like faulty, of a 3 s watchdog lease (a renewal every second),
// whose renewals and checks seen records.
type heldClients struct {
	plain, faulty, lapsing *Client
	rc                     rueidis.Client
	rf                     *replyFaults
	watched                *Client
	wrc                    rueidis.Client // watched's
	wrf                    *replyFaults   // watched's
	seen                   *renewalsOf
}

// heldClients makes the Clients of heldReplies.
func (w *world) heldClients() (heldClients, error) {
	var hc heldClients
	var err error
	opt := rueidis.ClientOption{InitAddress: w.e.addrs}
	if hc.plain, err = Dial(opt, WithPrefix("held"), WithLogger(quietLogger())); err != nil {
		return hc, err
	}
	if hc.lapsing, err = Dial(opt, WithPrefix("held"), WithLogger(quietLogger()), WithWatchdogLease(1200*time.Millisecond)); err != nil {
		hc.plain.Close()
		return hc, err
	}
	detect := DetectChanges(&opt) // before the client is made from opt
	if hc.rc, err = rueidis.NewClient(opt); err == nil {
		hc.rf = withReplyFaults(hc.rc)
		if hc.faulty, err = New(hc.rf, WithPrefix("held"), WithLogger(quietLogger()), detect); err != nil {
			hc.rc.Close()
		}
	}
	if err != nil {
		hc.plain.Close()
		hc.lapsing.Close()
		return hc, err
	}
	wopt := rueidis.ClientOption{InitAddress: w.e.addrs}
	detect = DetectChanges(&wopt)
	if hc.wrc, err = rueidis.NewClient(wopt); err == nil {
		hc.wrf = withReplyFaults(hc.wrc)
		hc.seen = &renewalsOf{}
		hc.seen.observe(hc.wrf)
		if hc.watched, err = New(hc.wrf, WithPrefix("held"), WithLogger(quietLogger()), WithWatchdogLease(3*time.Second), detect); err != nil {
			hc.wrc.Close()
		}
	}
	if err != nil {
		hc.rf.clear()
		hc.faulty.Close()
		hc.rc.Close()
		hc.plain.Close()
		hc.lapsing.Close()
	}
	return hc, err
}

// close ends every hold and closes the Clients.
func (hc heldClients) close() {
	hc.wrf.clear()
	hc.watched.Close()
	hc.wrc.Close()
	hc.rf.clear()
	hc.faulty.Close()
	hc.rc.Close()
	hc.lapsing.Close()
	hc.plain.Close()
}

// memberHangsBound bounds how long after its context ended the call of
// memberHangs returns: its grace, and one more for the load of the
// machine.
const memberHangsBound = 2*inflightGrace + 200*time.Millisecond

// memberHangs: a Group over a lock of the faulty Client between two of
// the plain one (taken one at a time), whose every reply on the faulty
// member's keys (its acquire script, the undo, the leave of its place) is
// held back once that member's acquire script ran; the call's context
// ends then. Lock, TryLock or Acquire must return within the grace of
// one call, whatever waits it made on contexts derived from its own.
func (w *world) memberHangs(rnd *rand.Rand, hc heldClients, name string) {
	began := time.Now()
	held := hc.faulty.Mutex(name + ":b")
	g := NewGroup(hc.plain.Mutex(name+":a"), held, hc.plain.Mutex(name+":c"))
	k := held.keys
	r := hc.rf.hold(touches(k.lock, k.queue, k.waiters), -1, 10*time.Second)
	defer hc.rf.drop(r)
	defer r.Open()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	forms := []string{"Lock", "TryLock", "Acquire"}
	form := rnd.IntN(len(forms))
	type outcome struct {
		l   *Lease
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		var o outcome
		switch form {
		case 0:
			o.l, o.err = g.Lock(ctx)
		case 1:
			o.l, o.err = g.TryLock(ctx)
		default:
			o.l = <-g.Acquire(ctx)
			o.err = o.l.Err()
		}
		done <- o
	}()
	release := func(o outcome) {
		if o.err == nil {
			uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
			r.Open() // the release's replies come
			_ = o.l.Unlock(uctx)
			ucancel()
		}
	}
	select {
	case <-r.Ran():
	case o := <-done:
		// The call ended before the member's script ran (a fault of the
		// schedule): nothing was held back.
		release(o)
		return
	case <-time.After(3 * time.Second):
		cancel()
		r.Open()
		release(<-done)
		return
	}
	w.count(w.attempts, "member hangs: a Group over two Clients whose member's replies are held back when its context ends")
	time.Sleep(time.Duration(50+rnd.IntN(150)) * time.Millisecond)
	ended := time.Now()
	cancel()
	o := <-done
	ret := time.Now()
	r.Open()
	// The bound is tighter than past-grace's elsewhere: this call's
	// Clients see no fault but the held replies, while a call that gave
	// each of its waits on the member (its acquisition, the undo, the
	// leave) a grace of its own returns three graces late.
	if over := ret.Sub(ended); over > memberHangsBound && !w.serverFaulted(began, ret) {
		w.violation("past-grace", "%q: a Group's %s over two Clients, its member's replies held back, returned %v after its context ended (grace %v, bound %v): %v",
			name, forms[form], over.Round(time.Millisecond), inflightGrace, memberHangsBound, o.err)
	}
	release(o)
}

// lapsedGrant: the lapsing Client's watchdog is held up (its Client
// lapses) while it takes a free lock with a fixed lease; the lease runs
// out and the plain Client takes the lock meanwhile. Once the lapse ends,
// the grant, which waited for it, must not be delivered while the plain
// Client holds the lock: it is confirmed in Redis first.
func (w *world) lapsedGrant(rnd *rand.Rand, hc heldClients, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	began := time.Now()
	fixed := time.Duration(400+rnd.IntN(400)) * time.Millisecond
	m := hc.lapsing.Mutex(name, WithLocalPasses(0, 0), WithFixedLease(fixed))
	other := hc.plain.Mutex(name, WithLocalPasses(0, 0))
	resume := hc.lapsing.stallWatchdog()
	stalled := true
	defer func() {
		if stalled {
			resume()
		}
	}()
	got := m.Acquire(ctx)
	// Granted in Redis (its grant waits for the watchdog), then taken by
	// the plain Client once the key expired.
	for start := time.Now(); time.Since(start) < 3*time.Second; time.Sleep(10 * time.Millisecond) {
		if st, err := other.Inspect(ctx); err == nil && st.Locked {
			break
		}
	}
	var ol *Lease
	for start := time.Now(); ol == nil && time.Since(start) < 4*time.Second; {
		if l, err := other.TryLock(ctx); err == nil {
			ol = l
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	resume()
	stalled = false
	if ol == nil {
		// The grant's key did not expire (the acquisition did not run, a
		// fault of the schedule): nothing came late.
		if l := <-got; l.Err() == nil {
			_ = l.Unlock(ctx)
		}
		return
	}
	w.count(w.attempts, "lapsed grant: a grant that waited while its Client lapsed, the lock taken by another Client meanwhile")
	select {
	case l := <-got:
		// Delivered at all, held or already found lost (its Client's
		// watchdog, running again, may have renewed it first), while
		// the acquisition's context is alive: the grant was not confirmed.
		if ol.Err() == nil && ctx.Err() == nil && !w.serverFaulted(began, time.Now()) {
			w.violation("late-grant-delivered", "%q: a grant that waited while its Client lapsed (fixed lease %v) was delivered (token %d, Err %v) while another Client holds the lock (token %d)",
				name, fixed, l.Token(), l.Err(), ol.Token())
		}
		_ = ol.Unlock(ctx)
		if l.Err() == nil {
			_ = l.Unlock(ctx)
		}
		return
	case <-time.After(time.Second):
	}
	_ = ol.Unlock(ctx)
	if l := <-got; l.Err() == nil {
		_ = l.Unlock(ctx)
	}
}

// leadAfterInvalidation: the faulty Client holds a Mutex with local
// passes, two of its goroutines waiting behind; the lock is
// force-unlocked, the first waiter leads an acquisition in Redis that
// reserves tokens for the second, and that acquisition's reply is held
// back while the lock is force-unlocked again and the plain Client takes
// it. The lead is delivered (its Unlock finds the lock another's), but
// its block must pass nothing on while the plain Client holds the lock.
func (w *world) leadAfterInvalidation(rnd *rand.Rand, hc heldClients, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	began := time.Now()
	m := hc.faulty.Mutex(name, WithLocalPasses(2, time.Minute))
	om := hc.plain.Mutex(name, WithLocalPasses(0, 0))
	l, err := lockTracked(ctx, m)
	if err != nil {
		return
	}
	defer func() { _ = l.Unlock(ctx) }()                           // lost by then, as a rule
	time.Sleep(time.Duration(100+rnd.IntN(50)) * time.Millisecond) // the key read for tracking
	leases := make(chan *Lease, 2)
	wctx, stopWaiters := context.WithCancel(ctx)
	var waiters sync.WaitGroup
	defer func() {
		stopWaiters()
		waiters.Wait()
		close(leases)
		for nl := range leases {
			_ = nl.Unlock(ctx)
		}
	}()
	for i := range 2 {
		waiters.Add(1)
		go func() {
			defer waiters.Done()
			if nl, err := m.Lock(wctx); err == nil {
				leases <- nl
			}
		}()
		// One at a time, so that they queue in order.
		for start := time.Now(); localWaiters(m) != i+1; time.Sleep(5 * time.Millisecond) {
			if time.Since(start) > 3*time.Second {
				return
			}
		}
	}
	lock := m.keys.lock
	r, open := hc.rf.gate(func(cmd []string) bool { return reservingAcquires(cmd) && slices.Contains(cmd, lock) }, 1, false)
	defer hc.rf.drop(r)
	defer open()
	// l's loss makes the first waiter lead an acquisition in Redis, which
	// reserves tokens for the second.
	if _, err := om.ForceUnlock(ctx); err != nil {
		return
	}
	select {
	case <-r.Ran():
	case <-time.After(3 * time.Second):
		return
	}
	ol := w.takenMeanwhile(ctx, om, open, "lead after invalidation: the reply of a cohort lead's acquisition comes after the lock was taken by another Client")
	if ol == nil {
		return
	}
	defer func() { _ = ol.Unlock(ctx) }()
	var lead *Lease
	select {
	case lead = <-leases:
	case <-time.After(5 * time.Second):
		return
	}
	unlocked := make(chan error, 1)
	go func() { unlocked <- lead.Unlock(ctx) }()
	select {
	case nl := <-leases:
		if ol.Err() == nil && !w.serverFaulted(began, time.Now()) {
			w.violation("pass-after-invalidation", "%q: a cohort lead's acquisition whose reply came after the lock was force-unlocked and taken by another Client (token %d) passed it on with token %d (Err %v)",
				name, ol.Token(), nl.Token(), nl.Err())
		}
		_ = nl.Unlock(ctx)
	case <-time.After(time.Second):
	}
	<-unlocked // ErrNotHeld, as a rule: the lock is another's
}

// keepAfterInvalidation: the faulty Client holds a Mutex with local
// passes, one of its goroutines waiting behind, and a second lock; the
// Unlock's keep runs in Redis and its reply is held back. Meanwhile the
// Client's watchdog is held up, the second lock force-unlocked (its loss
// reported, the watchdog awaited there, so the changes the Client hears
// of next are not checked), and the first force-unlocked and taken by
// the plain Client. The keep's reply, come after the invalidation, must
// pass nothing on while the plain Client holds the lock.
func (w *world) keepAfterInvalidation(rnd *rand.Rand, hc heldClients, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	began := time.Now()
	m := hc.faulty.Mutex(name, WithLocalPasses(2, time.Minute))
	m2 := hc.faulty.Mutex(name+":2", WithLocalPasses(0, 0))
	om, om2 := hc.plain.Mutex(name, WithLocalPasses(0, 0)), hc.plain.Mutex(name+":2")
	l, err := lockTracked(ctx, m) // nobody waits behind it: no tokens
	if err != nil {
		return
	}
	defer func() { _ = l.Unlock(ctx) }() // lost by then, as a rule
	l2, err := m2.Lock(ctx)
	if err != nil {
		return
	}
	defer func() { _ = l2.Unlock(ctx) }()
	time.Sleep(time.Duration(100+rnd.IntN(50)) * time.Millisecond) // both keys read for tracking
	leases := make(chan *Lease, 1)
	wctx, stopWaiter := context.WithCancel(ctx)
	waited := make(chan struct{})
	defer func() {
		stopWaiter()
		<-waited
		close(leases)
		for nl := range leases {
			_ = nl.Unlock(ctx)
		}
	}()
	go func() {
		defer close(waited)
		if nl, err := m.Lock(wctx); err == nil {
			leases <- nl
		}
	}()
	for start := time.Now(); localWaiters(m) != 1; time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > 3*time.Second {
			return
		}
	}
	lock := m.keys.lock
	r, open := hc.rf.gate(func(cmd []string) bool { return keeps(cmd) && slices.Contains(cmd, lock) }, 1, false)
	defer hc.rf.drop(r)
	unlocked := make(chan struct{})
	go func() {
		defer close(unlocked)
		_ = l.Unlock(ctx)
	}()
	defer func() {
		open()
		<-unlocked
	}()
	select {
	case <-r.Ran():
	case <-time.After(3 * time.Second):
		return
	}
	resume := hc.faulty.stallWatchdog()
	stalled := true
	defer func() {
		if stalled {
			resume()
		}
	}()
	// The Client reports l2 lost, and waits for the watchdog there.
	if _, err := om2.ForceUnlock(ctx); err != nil {
		return
	}
	for start := time.Now(); l2.Err() == nil; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 3*time.Second {
			return
		}
	}
	ol := w.takenMeanwhile(ctx, om, open, "keep after invalidation: the reply of an Unlock's keep comes after the lock was taken by another Client")
	if ol == nil {
		return
	}
	defer func() { _ = ol.Unlock(ctx) }()
	var nl *Lease
	select {
	case nl = <-leases:
		if ol.Err() == nil && !w.serverFaulted(began, time.Now()) {
			w.violation("pass-after-invalidation", "%q: an Unlock's keep whose reply came after the lock was force-unlocked and taken by another Client (token %d) passed it on with token %d (Err %v)",
				name, ol.Token(), nl.Token(), nl.Err())
		}
	case <-time.After(500 * time.Millisecond):
	}
	resume() // before the Unlock, which waits for the watchdog
	stalled = false
	if nl != nil {
		_ = nl.Unlock(ctx)
	}
}

// renewedAfterLoss: the watched Client holds a Mutex and a FairMutex,
// whose leases its watchdog renews in a batch each, one kind after the
// other; the reply of the first batch is held back while the other
// kind's lock is force-unlocked and its loss reported. Once the reply
// came, the pass must not renew (nor check) the lease it reported lost.
func (w *world) renewedAfterLoss(hc heldClients, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	began := time.Now()
	m, fm := hc.watched.Mutex(name+":m"), hc.watched.FairMutex(name+":f")
	lm, err := m.Lock(ctx)
	if err != nil {
		return
	}
	defer func() { _ = lm.Unlock(ctx) }()
	lf, err := fm.Lock(ctx)
	if err != nil {
		return
	}
	defer func() { _ = lf.Unlock(ctx) }()
	renewsOne, held := firstRenewal(lm, lf)
	r, open := hc.wrf.gate(renewsOne, 1, false)
	defer hc.wrf.drop(r)
	defer open()
	select {
	case <-r.Ran():
	case <-time.After(3 * time.Second):
		return
	}
	victim, force := lf, func() (bool, error) { return hc.plain.FairMutex(fm.name).ForceUnlock(ctx) }
	if held() == lf {
		victim, force = lm, func() (bool, error) { return hc.plain.Mutex(m.name).ForceUnlock(ctx) }
	}
	if forced, err := force(); err != nil || !forced {
		return
	}
	select {
	case <-victim.Lost():
	case <-time.After(3 * time.Second):
		return
	}
	lostAt := time.Now()
	w.count(w.attempts, "renewed after loss: a renewal batch's reply held back while a lease of another kind is lost")
	open()
	time.Sleep(300 * time.Millisecond) // the pass goes on with the other kind's batch, if it still would
	if found := hc.seen.naming(victim.h.owner, lostAt, true); len(found) > 0 && !w.serverFaulted(began, time.Now()) {
		w.violation("renewed-after-loss", "%q: the watchdog renewed or checked a lease (owner %s) after it reported its loss, once the reply of another kind's batch came: %q",
			name, victim.h.owner, found)
	}
}

// lockTracked locks m of a Client that detects changes once it took and
// released it, so that the Client tracks the lock's key.
func lockTracked(ctx context.Context, m *Mutex) (*Lease, error) {
	l, err := m.Lock(ctx)
	if err != nil {
		return nil, err
	}
	if err := l.Unlock(ctx); err != nil {
		return nil, err
	}
	time.Sleep(5 * time.Millisecond)
	return m.Lock(ctx)
}

// takenMeanwhile force-unlocks om's lock and takes it with om while a
// reply about that lock is held back, counts the attempt what, and lets
// the reply come (open) once the invalidations of the lock's key had time
// to arrive: the lease om got, or nil if either call failed (the reply is
// still held then).
func (w *world) takenMeanwhile(ctx context.Context, om *Mutex, open func(), what string) *Lease {
	if _, err := om.ForceUnlock(ctx); err != nil {
		return nil
	}
	ol, err := om.TryLock(ctx)
	if err != nil {
		return nil
	}
	w.count(w.attempts, what)
	time.Sleep(200 * time.Millisecond)
	open()
	return ol
}

// extendedAtTheEnd: the faulty Client holds a Mutex or a FairMutex (with a
// re-entry, at times) with a fixed lease of 0.4-0.8 s and extends it by 5
// s 30 ms before its Deadline; the Extend's script runs, and its reply is
// held back until the lease ran out. The lock must then be free for the
// plain Client well before the extension would end: the faulty Client
// releases it when the lease runs out with the Extend unsettled.
func (w *world) extendedAtTheEnd(rnd *rand.Rand, hc heldClients, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	began := time.Now()
	fixed := time.Duration(400+rnd.IntN(400)) * time.Millisecond
	const by = 5 * time.Second
	lock, other := hc.faulty.Mutex(name, WithFixedLease(fixed)).Lock, hc.plain.Mutex(name).TryLock
	inspect := described(hc.plain.Mutex(name).Inspect)
	if rnd.IntN(2) == 0 {
		lock, other = hc.faulty.FairMutex(name, WithFixedLease(fixed)).Lock, hc.plain.FairMutex(name).TryLock
		inspect = described(hc.plain.FairMutex(name).Inspect)
	}
	l, err := lock(ctx)
	if err != nil {
		return
	}
	if rnd.IntN(2) == 0 {
		if re, err := lock(l.Context()); err == nil {
			defer func() { _ = re.Unlock(ctx) }()
		}
	}
	defer func() { _ = l.Unlock(ctx) }()
	dl, ok := l.Deadline()
	if !ok || time.Until(dl) < 60*time.Millisecond {
		return
	}
	time.Sleep(time.Until(dl) - 30*time.Millisecond)
	owner := l.h.owner
	if ran, _ := extendHeld(ctx, hc.rf, l, by, func() { untilLost(l, 3*time.Second) }); !ran {
		return // not sent (the lease ran out first), or failed before it ran
	}
	if l.Err() == nil {
		return // extended: its reply came before the end
	}
	w.count(w.attempts, "extended at the end: an Extend that ran in Redis, its reply held until the fixed lease ran out")
	// The lease's key outlives its end by a tenth of the lease at most;
	// the release takes a round trip.
	var ol *Lease
	for start := time.Now(); ol == nil && time.Since(start) < 2*time.Second; {
		if got, err := other(ctx); err == nil {
			ol = got
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if ol != nil {
		_ = ol.Unlock(ctx)
		return
	}
	if !w.serverFaulted(began, time.Now()) {
		w.violation("extended-for-nobody", "%q: a fixed lease (%v, owner %s) ran out while its Extend by %v was on its way (%v), and 2s later another Client still could not take the lock: %s",
			name, fixed, owner, by, l.Err(), inspect(ctx))
	}
}

// described makes an Inspect of a lock (a Mutex's or a FairMutex's) the
// text a violation's report shows.
func described[S any](inspect func(context.Context) (S, error)) func(context.Context) string {
	return func(ctx context.Context) string {
		st, err := inspect(ctx)
		return fmt.Sprintf("%+v %v", st, err)
	}
}

// unlocksAtOnce: the faulty Client holds a Mutex and re-enters it, or
// takes a Group over it with the lease's Context; the two are unlocked at
// once, the release of one (the outer lease, or the re-entry) running
// first with its reply held back until the other's Unlock freed the lock.
// The first lease was released, not lost: Lost stays open, and its Unlock
// returns nil (check lost-while-released).
func (w *world) unlocksAtOnce(rnd *rand.Rand, hc heldClients, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	began := time.Now()
	m := hc.faulty.Mutex(name)
	l, err := m.Lock(ctx)
	if err != nil {
		return
	}
	group := rnd.IntN(2) == 0
	var inner *Lease
	if group {
		inner, err = NewGroup(m, hc.faulty.Mutex(name+":g")).Lock(l.Context())
	} else {
		inner, err = m.Lock(l.Context())
	}
	if err != nil {
		_ = l.Unlock(ctx)
		return
	}
	first, second := l, inner
	if !group && rnd.IntN(2) == 0 {
		first, second = inner, l
	}
	r, open := hc.rf.gate(runsWith(releaseScript, first.hold), 1, false)
	defer hc.rf.drop(r)
	done := make(chan error, 1)
	go func() { done <- first.Unlock(ctx) }()
	select {
	case <-r.Ran():
	case err := <-done:
		open()
		_ = err
		_ = second.Unlock(ctx)
		return
	}
	err = second.Unlock(ctx)
	var lostErr error
	select {
	case <-first.Lost():
		lostErr = first.Err()
	case <-time.After(200 * time.Millisecond):
	}
	open()
	ferr := <-done
	if err != nil || w.serverFaulted(began, time.Now()) {
		return
	}
	w.count(w.attempts, "unlocks at once: a lease and its re-entry or Group, the first release's reply held until the other freed the lock")
	if lostErr != nil || ferr != nil {
		w.violation("lost-while-released", "%q (group %v): the lease whose release ran first, its reply held, reported lost (%v) once the other's release freed the lock; its Unlock returned %v",
			name, group, lostErr, ferr)
	}
}

// heldAfterIdle: the lapsing Client takes a lock while its watchdog sleeps
// with nothing to watch (once it has run: a Client's first lock starts
// it), and holds it for one and a half of its 1.2 s watchdog leases. The
// watchdog must renew it in time: a loss, or an Unlock that finds the hold
// gone, is a violation (lost-after-idle) unless a server restarted or
// failed over (a Cluster master's restart included).
func (w *world) heldAfterIdle(hc heldClients, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := hc.lapsing.Mutex(name)
	if l, err := m.Lock(ctx); err != nil || l.Unlock(ctx) != nil {
		return
	}
	for until := time.Now().Add(3 * time.Second); !hc.lapsing.watchdog.idle(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(until) {
			return
		}
	}
	began := time.Now()
	l, err := m.Lock(ctx)
	if err != nil {
		return
	}
	lease := hc.lapsing.cfg.watchdogLease
	select {
	case <-l.Lost():
	case <-time.After(lease + lease/2):
	}
	lost := l.Err()
	uerr := l.Unlock(ctx)
	w.count(w.attempts, "held after the watchdog slept with nothing to watch")
	// An Unlock that Redis could not serve (a master loading after its
	// restart) says nothing of the renewals; one that found the hold gone
	// does.
	if (lost != nil || errors.Is(uerr, ErrNotHeld)) && !w.faulted(-1, began, time.Now(), "restart", "failover") {
		w.violation("lost-after-idle", "%q: a lock taken while its Client's watchdog (lease %v) slept with nothing to watch, held %v: lost %v, Unlock %v",
			name, lease, time.Since(began).Round(time.Millisecond), lost, uerr)
	}
}
