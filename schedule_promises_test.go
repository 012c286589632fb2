package redisync

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// This file holds TestSchedule's checks of promises that its other checks
// do not see broken: a call that waits returns within its grace of its
// context's end; a lease reported lost is no longer renewed; a Client's
// presence passes keep its deadline ahead on every lock it waits for; a
// lease is delivered with most of its lease ahead.

// graceMargin is how much later than inflightGrace after its context
// ended a blocking call of a schedule may return: the time the machine's
// load (the race detector, the schedule's twenty actors, other tests) may
// add to the call's last steps.
const graceMargin = time.Second

// callEnd notes when the context of a blocking call ended.
type callEnd struct {
	ctx  context.Context
	at   atomic.Int64 // UnixNano of the moment ctx was seen done; 0 before
	stop func() bool
}

// endOf starts noting when ctx ends.
func endOf(ctx context.Context) *callEnd {
	ce := &callEnd{ctx: ctx}
	ce.stop = context.AfterFunc(ctx, func() { ce.at.Store(time.Now().UnixNano()) })
	return ce
}

// ended returns when ce's context ended, or zero if it has not: its
// deadline when it ran out, otherwise when it was seen cancelled (a moment
// after, which only makes the check more lenient).
func (ce *callEnd) ended() time.Time {
	err := ce.ctx.Err()
	if err == nil {
		return time.Time{}
	}
	var at time.Time
	if ns := ce.at.Load(); ns != 0 {
		at = time.Unix(0, ns)
	}
	if dl, ok := ce.ctx.Deadline(); ok && errors.Is(err, context.DeadlineExceeded) && (at.IsZero() || dl.Before(at)) {
		at = dl
	}
	if at.IsZero() {
		at = time.Now()
	}
	return at
}

// returnedInGrace checks that a call that waits (Lock, TryLock, Wait), of
// Client client, which returned just now, returned within inflightGrace
// (and graceMargin) of its context's end, whatever the faults did: the
// promise of every call that waits.
func (w *world) returnedInGrace(ce *callEnd, client int, what string) {
	ret := time.Now()
	ce.stop()
	end := ce.ended()
	if end.IsZero() {
		return
	}
	if over := ret.Sub(end); over > inflightGrace+graceMargin && !w.stalled(client, end, ret) {
		// (A Client whose watchdog lapsed returns late: its calls that
		// add or end a hold wait for it.)
		w.violation("past-grace", "c%d %s returned at %s, %v after its context ended at %s (grace %v); faults: %s",
			client, what, w.rel(ret), over.Round(time.Millisecond), w.rel(end), inflightGrace,
			w.faultsAround(end.Add(-5*time.Second), ret, 0))
	}
}

// checkRenewalStops checks that the key of r, a Mutex or FairMutex lease
// whose loss was reported at lost, stops being renewed: once r's Unlock
// returned (or it was left without one), and its lease passed since the
// loss and since the faults then on its Client ended (a renewal held up in
// a paused connection runs when it resumes), the key is no longer its
// owner's, unless another lease of that owner (a re-entry) holds it on. A
// loss whose key is still the owner's (a connection lost for longer than
// the lease) is what it checks: the Client must not renew a key it told
// its caller it lost. watchLoss calls it; a check whose moment comes after
// the schedule's stop is given up, not to make the schedule longer.
func (w *world) checkRenewalStops(r *rec, lost time.Time) {
	l := r.lease
	if l.h == nil || (r.prim != "mutex" && r.prim != "fair") || w.pair != nil {
		return
	}
	<-r.done // and r.dur, which an Extend may have set, is final
	if r.dur > 3*time.Second {
		return
	}
	since := lost
	w.mu.Lock()
	stop := w.stop
	for _, f := range w.faults {
		if (f.client == r.client || f.kind == "restart" || f.kind == "failover") && !f.start.After(lost) && f.end.After(since) {
			since = f.end
		}
	}
	w.mu.Unlock()
	limit := r.dur + r.dur/10 + 500*time.Millisecond
	timer := time.NewTimer(time.Until(since.Add(limit)))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-stop:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	kind, name, _ := strings.Cut(r.res[0], ":")
	var owner string
	var err error
	if kind == "fair" {
		var st FairMutexState
		st, err = w.observer.FairMutex(name).Inspect(ctx)
		owner = st.Owner
	} else {
		var st MutexState
		st, err = w.observer.Mutex(name).Inspect(ctx)
		owner = st.Owner
	}
	if err == nil && owner == l.h.owner && !w.liveOwner(owner) {
		w.violation("renewed-after-loss", "%s %v of c%d (token %d, lease %v fixed=%v, delivered %s) reported lost at %s (%v): its key is still its own at %s, %v after %s; in Redis: %s; faults: %s",
			r.prim, r.res, r.client, r.token, r.dur, r.fixed, w.rel(r.at), w.rel(lost), l.Err(), w.rel(time.Now()), limit, w.rel(since),
			w.redisState(r.res[0]), w.faultsAround(lost.Add(-5*time.Second), time.Now(), 0))
	}
}

// placesScript reads a lock's queue (KEYS[1]), waiters hash (KEYS[2]) and
// hash (KEYS[3]): the server's clock in ms, the holder's owner id (” when
// free), then for each place but '*' its waiter id and the deadline of its
// Client (empty when it has none).
const placesScript = `local t = redis.call('TIME')
local owner = redis.call('TYPE', KEYS[3]).ok == 'hash' and redis.call('HGET', KEYS[3], 'owner') or ''
local out = {t[1] * 1000 + math.floor(t[2] / 1000), owner or ''}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if id ~= '*' then
    local c = string.match(id, '^(.*):') or id
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', KEYS[2], '\0c' .. c) or ''
  end
end
return out`

// presenceMonitor checks, every 100ms until stop, that every place in the
// queue of a Mutex or FairMutex whose Client is one of clients and waits
// for the lock (the model has a live waiter of it there, waiting for a
// second or more) has its Client's deadline written within two of its
// presence passes: the passes, a third of the waiter expiry apart, renew
// it on every lock the Client waits for, so that no release takes its
// waiters for dead. A place whose Client's passes a fault may have held
// up (on its connections, its replies, its presence loop, a restart or a
// failover) is not judged; one place is reported once.
func (w *world) presenceMonitor(clients []*schedClient, stop <-chan struct{}) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	byID := map[string]int{}
	for _, sc := range clients {
		byID[sc.c.ID()] = sc.i
	}
	reported := map[string]bool{}
	var names []string
	for _, n := range mutexNames {
		names = append(names, "mutex:"+n)
	}
	for _, n := range fairNames {
		names = append(names, "fair:"+n)
	}
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		for _, res := range names {
			w.checkPlaces(res, byID, reported)
		}
	}
}

// checkPlaces is presenceMonitor's check of one lock, res.
func (w *world) checkPlaces(res string, byID map[string]int, reported map[string]bool) {
	keys := w.lockKeysOf(res)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rc := w.observer.rc
	vals, err := rc.Do(ctx, rc.B().Eval().Script(placesScript).Numkeys(3).Key(keys.queue, keys.waiters, keys.lock).Build()).ToArray()
	if err != nil || len(vals) < 2 {
		return
	}
	now, err := vals[0].AsInt64()
	if err != nil {
		return
	}
	holder, _ := vals[1].ToString()
	seen := time.Now()
	for i := 2; i+1 < len(vals); i += 2 {
		id, _ := vals[i].ToString()
		dl, _ := vals[i+1].ToString()
		deadline, err := strconv.ParseInt(dl, 10, 64)
		if err != nil || reported[res+" "+id] {
			continue
		}
		client, ok := byID[clientIDOf(id)]
		if !ok {
			continue
		}
		if holder != "" && clientIDOf(holder) == clientIDOf(id) {
			// Its Client holds the lock: its goroutines that want it wait
			// for a local pass, with no place of their own in the queue,
			// and the Client need not renew its deadline there. (A place
			// of its left in the queue then is one an earlier acquisition
			// left behind, which lapses with that deadline.)
			continue
		}
		w.mu.Lock()
		var waiting *waiter
		if ns := w.names[res]; ns != nil {
			for _, wt := range ns.waiters {
				if wt.client == client && wt.ctx.Err() == nil && seen.Sub(wt.start) > time.Second {
					waiting = wt
				}
			}
		}
		w.mu.Unlock()
		// Written a pass ago at the latest, the deadline is two thirds of
		// the expiry ahead or more; two passes missed (and 300ms for the
		// machine's load) are a violation.
		if waiting == nil || deadline-now >= (waiting.expiry/3-300*time.Millisecond).Milliseconds() {
			continue
		}
		since := time.Duration(now-deadline)*time.Millisecond + waiting.expiry
		// The faults that can hold up its passes since its deadline was
		// written: on its connections (a connection cut under a pass
		// fails it, and the pass is retried later), on its replies (a
		// pass waits for the checks it runs), on its presence loop, on
		// Redis.
		from := seen.Add(-since - time.Second)
		if w.faulted(client, from, seen, "pause-conn", "pause-client", "latency", "cut-subscriber", "hold-reply", "lose-reply", "stall-presence") ||
			w.faulted(-1, from, seen, "restart", "failover") {
			continue
		}
		reported[res+" "+id] = true
		w.violation("presence-lapsed", "%s: the place %q of c%d, whose %s waits since %s (expiry %v), has its Client's deadline written %v ago at %s; in Redis: %s",
			res, id, client, waiting.form, w.rel(waiting.start), waiting.expiry, since, w.rel(seen), w.redisState(res))
	}
}

// checkLeaseAhead checks that l, which an acquisition of t by Client
// client returned at at, was delivered with most of its first lease ahead
// (the lease the key got first: a lock handed over at a release gets the
// shortest of the lease, the waiter expiry and the claim window,
// handOverClaim). A grant that comes late is
// confirmed by a renewal before it is delivered, and counted from it; one
// in time leaves more than half of it. The check asks for a quarter, for
// the machine's load. A lease passed on locally, whose Deadline is its
// holder's, is not judged.
func (w *world) checkLeaseAhead(t *target, l *Lease, client int, at time.Time) {
	if l.h == nil || l.h.kind.deadline != nil || l.co != nil && l.token != 0 {
		return
	}
	first := t.lease
	if !t.fixed && t.expiry > 0 {
		first = min(first, t.expiry, handOverClaim)
	}
	dl, ok := l.Deadline()
	if ok && dl.Sub(at) < first/4 && !w.stalled(client, at.Add(-first), at) {
		// (A grant whose Client lapsed before it could deliver it is
		// delivered late.)
		w.violation("delivered-short", "%s %v of c%d (token %d, lease %v fixed=%v) delivered at %s with its Deadline %v ahead, under a quarter of its first lease %v; faults: %s",
			t.prim, t.res, client, l.Token(), t.lease, t.fixed, w.rel(at), dl.Sub(at).Round(time.Millisecond), first,
			w.faultsAround(at.Add(-5*time.Second), at, 0))
	}
}

// renewalSlack is how long after a lease's loss was seen a renewal of it
// may still be sent: a watchdog pass that gathered it before the loss.
const renewalSlack = time.Second

// watchRenewals lets the schedule see the renewals that sc's Client sends,
// when it is made over a reply-fault wrapper: an observer that acts on no
// call (Observe), added before any fault's rule, so that it sees every
// command. A renewal (of any kind of lock) that names the
// owner of a lease whose loss was seen more than renewalSlack before is a
// violation: the watchdog stops renewing a lease once its loss is
// reported, whether its key is still its own or not.
func (w *world) watchRenewals(sc *schedClient) {
	if sc.rf == nil {
		return
	}
	renewals := []func([]string) bool{runs(renewScript), runs(rwRenewScript), runs(semRenewScript)}
	reported := map[string]bool{} // guarded by the wrapper's lock, which the observer runs under
	sc.rf.Observe(func(cmd []string) {
		renewal := false
		for _, m := range renewals {
			renewal = renewal || m(cmd)
		}
		if !renewal {
			return
		}
		for _, a := range scriptArgs(cmd) {
			v, ok := w.lostOwners.Load(a)
			if !ok || reported[a] {
				continue
			}
			if lost := v.(time.Time); time.Since(lost) > renewalSlack {
				reported[a] = true
				w.violation("renewed-after-loss", "c%d renews the lease of owner %s at %s, %v after its loss was seen at %s (keys and arguments %q)",
					sc.i, a, w.rel(time.Now()), time.Since(lost).Round(time.Millisecond), w.rel(lost), cmd[3:])
			}
		}
	})
}
