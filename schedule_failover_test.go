package redisync

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redisync/redisync/internal/faultproxy"
	"github.com/redisync/redisync/internal/redistest"
)

// The schedules of TestSchedule that run on a primary with one replica,
// every Client made WithReplicaAck(1, replicaAckTimeout), and the failover
// fault they may take.
//
// What WithReplicaAck promises across a failover, and so what the checks
// excuse (WithReplicaAck's doc comment, docs/RELIABILITY.md "Failover with
// asynchronous replication"): every grant (an acquisition, a re-entry, a
// Group, the block of tokens a keep reserves) was acknowledged by the
// replica before its Lease was delivered, or undone; renewals, Extends,
// releases and ForceUnlocks are not waited for. The failover first waits
// until the replica has everything the primary did before it began (the
// barrier), then cuts the replica's link, lets the primary run on a while,
// kills it and promotes the replica. So the promoted replica has every
// grant delivered, and it may lack what the primary did after the barrier
// that nobody waited for:
//
//   - renewals: a lease live at the barrier (or delivered after it) is
//     held on the replica at least until its lapse, its Deadline as it was
//     at the barrier (as it was delivered): the last renewal that replied
//     before then is on the replica, and its Deadline is nine tenths of a
//     lease after that renewal was sent. After its lapse its hold may be
//     gone, unless its Client renewed it, or released it, on the new
//     primary, which then held it throughout (renewedAfter). So a lapsed
//     lease is not counted as holding by the check at delivery (a
//     delivery that overlaps it is checked again once the schedule ends,
//     and is a violation if the lease was renewed on the new primary
//     after all), its Unlock may find it gone, Redis may show another
//     owner, and the lock model lets its end come as early as its lapse;
//   - releases and ForceUnlocks: a hold released after the barrier may
//     come back on the new primary and stay until its copy expires,
//     renewed by nobody. The failover finds such holds on the promoted
//     replica (an owner with no live lease, or whose Unlock, or a
//     ForceUnlock of the name, was on its way after the barrier): the
//     name may stay taken until the copy's PTTL ends (the liveness
//     monitor waits), and the hold is not reported as left after Close.
//
// Nothing else is excused: a lease delivered without its grant on the
// replica (an acquisition that skipped the WAIT), a lease that lost its
// hold before its lapse, or a renewed one that lost it, is a violation;
// and an exclusive lease live across the failover, not force-unlocked,
// that reports its lock gone (ErrExpired, ErrTakenOver) before its lapse
// while no other fault acted near is one too ("lost-across-failover").
//
// A Group's lease is never said to be renewed on the new primary (its
// holds are its members'): its lapse stands once passed.

// replicaAckTimeout is how long the Clients of a schedule with a replica
// wait for its acknowledgement.
const replicaAckTimeout = 500 * time.Millisecond

// replicaPair is a primary with one replica, which replicates through
// link (a failover cuts it), and front, a proxy every Client of the
// schedule goes through (a failover switches it to the promoted replica).
type replicaPair struct {
	primary, replica *redistest.Server
	link, front      *faultproxy.Proxy
	gone             []*redistest.Server // servers a failover left
}

// startPair starts a primary and its replica, in sync.
func startPair() (*replicaPair, error) {
	primary, err := redistest.StartServer("--repl-diskless-sync-delay", "0")
	if err != nil {
		return nil, err
	}
	pr := &replicaPair{primary: primary}
	if pr.front, err = faultproxy.New(primary.Addr); err != nil {
		pr.close()
		return nil, err
	}
	if err := pr.addReplica(); err != nil {
		pr.close()
		return nil, err
	}
	return pr, nil
}

// addReplica starts a replica of the primary, behind a new link, and waits
// until it is in sync.
func (pr *replicaPair) addReplica() error {
	link, err := faultproxy.New(pr.primary.Addr)
	if err != nil {
		return err
	}
	pr.link = link
	host, port, _ := net.SplitHostPort(link.Addr())
	if pr.replica, err = redistest.StartServer("--replicaof", host, port, "--repl-diskless-sync-delay", "0"); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := pr.replica.Do("INFO", "replication")
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s not in sync after 10s: %v", pr.replica.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// close stops the pair's proxies and servers.
func (pr *replicaPair) close() {
	for _, p := range []*faultproxy.Proxy{pr.front, pr.link} {
		if p != nil {
			p.Close()
		}
	}
	for _, s := range append([]*redistest.Server{pr.primary, pr.replica}, pr.gone...) {
		if s != nil {
			s.Stop()
		}
	}
}

// replicationOffset returns an offset field of a server's INFO replication.
func replicationOffset(s *redistest.Server, field string) (int64, error) {
	info, err := s.Do("INFO", "replication")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s in INFO replication", s.Addr, field)
}

// failover fails the schedule's primary over to its replica, as the
// comment at the top of this file says, and returns when the failover
// began and when the promoted replica had a replica of its own in sync
// (until then, acquisitions fail with ErrNotReplicated).
func (w *world) failover(rnd *rand.Rand) (began, ended time.Time, err error) {
	pr := w.pair
	began = time.Now()
	w.failingOver(began)
	// The barrier: the replica has everything the primary did before it.
	off, err := replicationOffset(pr.primary, "master_repl_offset")
	for deadline := time.Now().Add(5 * time.Second); err == nil; {
		var got int64
		if got, err = replicationOffset(pr.replica, "slave_repl_offset"); err == nil && got >= off {
			break
		}
		if time.Now().After(deadline) {
			err = fmt.Errorf("replica at offset %d, not %d, after 5s", got, off)
		}
		time.Sleep(time.Millisecond)
	}
	if err != nil {
		return began, time.Now(), err
	}
	// What the primary does from now on, the replica never sees.
	pr.link.Blackhole()
	time.Sleep(time.Duration(50+rnd.IntN(450)) * time.Millisecond)
	if err := pr.primary.Kill(); err != nil {
		return began, time.Now(), err
	}
	killed := time.Now()
	w.failedOver(killed)
	pr.link.Close()
	if _, err := pr.replica.Do("REPLICAOF", "NO", "ONE"); err != nil {
		return began, time.Now(), err
	}
	pr.front.SetTarget(pr.replica.Addr)
	pr.front.Cut()
	pr.gone = append(pr.gone, pr.primary)
	pr.primary, pr.replica = pr.replica, nil
	w.e.server = pr.primary
	w.comeBack(began, killed)
	err = pr.addReplica()
	return began, time.Now(), err
}

// failingOver records that a failover begins: each lease live now (held,
// or with its Unlock on its way) lapses at its Deadline now (see the top
// of this file).
func (w *world) failingOver(at time.Time) {
	w.mu.Lock()
	w.fo = &failoverMark{barrier: at}
	for _, o := range w.recs {
		o.setLapse()
	}
	w.mu.Unlock()
	w.lh.failingOver()
}

// failedOver records that the old primary was killed at killed: nothing
// is delivered until its replica is promoted, and what is renewed after
// that was renewed on the replica.
func (w *world) failedOver(killed time.Time) {
	w.mu.Lock()
	w.fo.killed = killed
	w.mu.Unlock()
	w.lh.failedOver(killed)
}

// failoverMark is the schedule's failover: the barrier, and when the old
// primary was killed (zero until then).
type failoverMark struct {
	barrier, killed time.Time
}

// setLapse sets o's lapse to its lease's Deadline now, if it has one.
// w.mu is held.
func (o *rec) setLapse() {
	if dl, ok := o.lease.Deadline(); ok {
		o.lapse = dl
	}
}

// lapsedLocked reports whether a failover may have taken o's hold by at:
// at is past its lapse and its Client has not renewed it on the new
// primary (yet). w.mu is held.
func (w *world) lapsedLocked(o *rec, at time.Time) bool {
	return !o.lapse.IsZero() && at.After(o.lapse) && !renewedAfter(o.lease, w.fo.killed)
}

// excusedByFailover reports whether a failover may have taken o's hold by
// at, and counts it as what for the report if so.
func (w *world) excusedByFailover(o *rec, at time.Time, what string) bool {
	w.mu.Lock()
	lapsed := w.lapsedLocked(o, at)
	w.mu.Unlock()
	if lapsed {
		w.count(w.failures, "excused after a failover: "+what)
	}
	return lapsed
}

// comeBack finds the holds on the promoted replica whose release the
// failover may have lost (see the top of this file): their names may
// stay taken until the copy expires, and they are not reported after
// Close.
func (w *world) comeBack(barrier, killed time.Time) {
	held, err := w.eachKey(heldLocksScript(false))
	if err != nil {
		w.t.Errorf("reading the promoted replica's locks: %v", err)
		return
	}
	names := map[string]string{} // lock key -> model resource
	for _, n := range mutexNames {
		names[w.observer.keysFor(n).lock] = "mutex:" + n
	}
	for _, n := range fairNames {
		names[w.observer.FairMutex(n).keys.lock] = "fair:" + n
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, kl := range held {
		f := strings.Fields(kl.line)
		if len(f) != 3 {
			continue
		}
		key, owner := f[0], f[1]
		pttl, _ := strconv.ParseInt(f[2], 10, 64)
		res := names[key]
		if w.liveOwner(owner) && !w.spanned(w.unlocking[owner], barrier, killed) && !w.spanned(w.forcing[res], barrier, killed) {
			continue
		}
		w.leftToExpire.Store(owner, true)
		w.count(w.failures, "hold back after a failover lost its release")
		if res == "" {
			continue
		}
		ns := w.name(res)
		if u := now.Add(time.Duration(pttl) * time.Millisecond); u.After(ns.uncertain) {
			ns.uncertain = u
		}
	}
}

// spanned reports whether one of spans (call, return; a zero return: on
// its way) was on its way between from and to.
func (w *world) spanned(spans []*[2]time.Time, from, to time.Time) bool {
	for _, s := range spans {
		if !s[0].After(to) && (s[1].IsZero() || !s[1].Before(from)) {
			return true
		}
	}
	return false
}

// overlapAfterFailover is a delivery that overlapped a lapsed lease, to
// check once the schedule ends.
type overlapAfterFailover struct {
	o    *rec
	line string
}

// checkLapsedOverlaps reports each delivery that overlapped a lapsed lease
// whose Client renewed it on the new primary after all: that lease held
// its lock throughout.
//
// It counts, for the report, the leases live across the failover: those
// renewed on the new primary, and how the others ended.
func (w *world) checkLapsedOverlaps() {
	w.mu.Lock()
	pending, fo := w.lapsedOverlaps, w.fo
	w.lapsedOverlaps = nil
	var across []*rec
	for _, o := range w.recs {
		if !o.lapse.IsZero() {
			across = append(across, o)
		}
	}
	w.mu.Unlock()
	for _, o := range across {
		how := "ended before renewing on the new primary"
		switch err := o.lease.Err(); {
		case renewedAfter(o.lease, fo.killed):
			how = "renewed on the new primary"
		case err != nil && !errors.Is(err, ErrReleased) && !errors.Is(err, ErrClosed):
			when, lostAt := "after its lapse", time.Time{}
			if h := o.lease.h; h != nil {
				h.mu.Lock()
				lostAt = h.lostAt
				h.mu.Unlock()
				if lostAt.Before(o.lapse) {
					when = "before its lapse"
				}
			}
			how = "then " + errClass(err) + " " + when
			if o.forced {
				how += " (force-unlocked)"
			}
			// Its grant is on the replica, which so holds it until its
			// lapse: found gone before then, with nothing else to take
			// it, the failover lost what WithReplicaAck waited for.
			// (Shared holds, reads and permits, are counted, not judged,
			// as watchLoss does with their losses.)
			if when == "before its lapse" && !o.forced && modeled(o.prim) && (errors.Is(err, ErrExpired) || errors.Is(err, ErrTakenOver)) {
				if near := w.faultsBesides(o.at.Add(-5*time.Second), lostAt, "failover"); near == "" {
					w.violation("lost-across-failover", "%s %v of c%d (token %d, lease %v fixed=%v, delivered %s) lost at %s, before its lapse at %s, after a failover (killed %s): %v",
						o.prim, o.res, o.client, o.token, o.dur, o.fixed, w.rel(o.at), w.rel(lostAt), w.rel(o.lapse), w.rel(fo.killed), err)
				}
			}
		}
		w.count(w.failures, o.prim+" live across a failover: "+how)
	}
	for _, p := range pending {
		if fo != nil && renewedAfter(p.o.lease, fo.killed) {
			w.violation("overlap", "%s (it was renewed on the new primary after a failover, which so held it throughout)", p.line)
		}
	}
}

// faultsBesides describes the faults other than of kind that acted
// between from and to, or ended within 3s before from; "" when none did.
func (w *world) faultsBesides(from, to time.Time, kind string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, f := range w.faults {
		if f.kind != kind && !f.start.After(to) && !f.end.Add(3*time.Second).Before(from) {
			out = append(out, fmt.Sprintf("%s@c%d", f.name(), f.client))
		}
	}
	return strings.Join(out, " ")
}
