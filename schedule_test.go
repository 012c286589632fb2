package redisync

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync/internal/redistest"
	"github.com/redisync/redisync/internal/testenv"
)

// TestSchedule runs random schedules of every primitive on several Clients,
// some of them behind fault proxies, with random lease settings, deadlines
// (a tenth of them long), cancels and re-entries (nested, or outliving the
// lease they re-enter, with a Context that carries its cancellation or
// not), Groups taken with a Mutex lease's Context, local passes with and
// without keeps (crowds of one Client's goroutines on one Mutex,
// schedule_cohort_test.go), Extend, Detach and ForceUnlock mid-hold,
// ForceUnlocks from a Client that need not hold the lock,
// concurrent and retried Unlocks, lost leases left without Unlock, and a
// few leases held through the faults, while faults are injected at random,
// alone or several on one Client at once: connections held up, latency,
// pub/sub messages dropped or delayed (some past a hand-over's lease), subscription
// connections cut, a presence loop stalled, Redis restarted (with its data
// kept, so that the locks outlive the restart), and, on Clients made with
// New over a wrapped rueidis client (replyfault_test.go), the replies of a
// few calls of one kind (acquire, re-entry, hand-over claim, release, keep,
// renew, group) held back past the lease or lost after their script ran.
// Beside them, a dedicated actor with Clients of its own lines up two
// faults at once (schedule_late_test.go): an acquisition's reply held back
// while another Client takes the lock (the late grant must not be
// delivered), a release's message that comes just after the timer of a
// Group that waits for it (no lost wake-up may be counted for it), a
// hand-over's message with a token its waiter's last attempt saw, after
// that attempt (it must not be taken as the lock), and the leave of a
// waiter that gave up refused while another waiter of its Client waits
// (its place must leave the queue once the leave can run).
// A schedule runs on a standalone server; or, one in four, on a 3-master
// Cluster (started once, by the first schedule that needs it), where a
// proxied Client has a proxy in front of each master, and a restart is one
// master's;
// or, one in six, on a primary with one replica, every Client made
// WithReplicaAck, where a failover to the replica replaces the restart
// (schedule_failover_test.go says what the checks excuse around it), the
// replication link lags, and a Mutex lease delivered before the failover
// must have its grant on the replica (schedule_replicalag_test.go).
// The test's own model of who holds what checks, at every delivery, mutual
// exclusion, the semaphore's size, that tokens only increase and that the
// lease is held in Redis (unless a ForceUnlock ran during its call); a monitor checks that no waiter waits long for a
// lock the model says is free; a lease left to expire must expire within
// its lease, and a lost one must not be renewed (schedule_promises_test.go,
// with the checks that a call that waits returns within its grace, that a
// lease is delivered with most of its lease ahead and that presence keeps a
// waiting Client's deadline ahead); a renewed lease must not be lost while
// nothing faults; at the end of each schedule nothing may be left, and the
// history of its exclusive ownerships (local passes, re-entries and Group
// members included) must be linearizable for the lock model (lockmodel_test.go):
// one owner at a time, with rising tokens, in real time. Every violation is
// collected and reported at the end, one line per kind, with the seed that
// replays the schedule's choices (its deployment, its faults; not its
// timing):
//
//	go test -race -run '^TestSchedule$' -seed N .
//	REDISYNC_SEED=N go test -race -run '^TestSchedule$' .
//	go test -race -run '^TestSchedule$' -seed N -schedule K .   (only schedule K)
//
// It runs about 36s of schedules; REDISYNC_SOAK=1 runs schedules until at
// least 100 000 acquisitions were made (or for -soak-for, 60 minutes at
// most).
func TestSchedule(t *testing.T) {
	seed := testSeed(t, "TestSchedule")
	e := ownServer(t, keptData...)
	noLeak := leakCheck(t)
	w := newWorld(t, e, seed)
	rnd := rand.New(rand.NewPCG(seed, 0x5c4ed))

	start := time.Now()
	budget, minAcq, capTime := 36*time.Second, int64(0), time.Duration(0)
	if os.Getenv("REDISYNC_SOAK") != "" {
		budget, minAcq, capTime = 0, 100000, 60*time.Minute
		if *soakFor > 0 {
			capTime = *soakFor
		}
	}
	for n := 0; ; n++ {
		el := time.Since(start)
		if budget > 0 && el >= budget {
			break
		}
		if budget == 0 && (w.totalAcquired() >= minAcq || el >= capTime) {
			break
		}
		d := time.Duration(5000+rnd.IntN(3000)) * time.Millisecond
		if budget > 0 && *onlySchedule < 0 {
			d = min(d, max(budget-el, 2*time.Second))
		}
		s := rnd.Uint64()
		if *onlySchedule >= 0 {
			if n < *onlySchedule {
				continue
			}
			w.runSchedule(n, s, d)
			break
		}
		w.runSchedule(n, s, d)
	}
	for _, se := range w.envs {
		se.observer.Close()
	}
	noLeak(nil, restartedServer)
	w.checkHoldersNamed()
	w.report(time.Since(start))
}

// onlySchedule replays one schedule of a TestSchedule seed: the report
// names each schedule's number.
var onlySchedule = flag.Int("schedule", -1, "run only this schedule of TestSchedule's seed")

// soakFor bounds TestSchedule's soak (REDISYNC_SOAK) in time: it ends at
// 100 000 acquisitions or then, whichever comes first (60 minutes when 0).
var soakFor = flag.Duration("soak-for", 0, "with REDISYNC_SOAK: end TestSchedule's soak after this long, or at 100 000 acquisitions (0: 60 minutes)")

// testSeed returns the seed of a randomized test (TestSchedule,
// TestFencedLinearizable...), from -seed, REDISYNC_SEED or the clock, and
// logs how to replay it.
var testSeed = testenv.Seed

// rec is one ownership the model knows of: a delivered lease.
type rec struct {
	id   int64
	prim string   // "mutex", "fair", "group", "rw-write", "rw-read", "semaphore"
	res  []string // the resources it holds: "mutex:NAME", "fair:NAME", "rw:NAME", "sem:NAME"
	// via: the resources it holds through a re-entry of another rec's
	// ownership (a Group taken with a Mutex lease's Context), not in res.
	via     []string
	client  int
	lease   *Lease
	token   uint64
	permits int
	dur     time.Duration // its lease: fixed, or its Client's watchdog lease
	at      time.Time     // when its delivery was seen
	call    time.Time     // when its acquisition was called
	fixed   bool

	occupied bool          // counted as occupying its names (liveness); guarded by world.mu
	done     chan struct{} // closed once Unlock returned
	life     *leaseLife    // for the lock model; nil for a lease it does not check
	forced   bool          // a ForceUnlock of one of its names was called; guarded by world.mu
	// lapse: a failover may take its hold from then on, unless its
	// Client renews it on the new primary (schedule_failover_test.go);
	// guarded by world.mu.
	lapse time.Time
}

// waiter is an acquisition that waits (Lock or Acquire of a Mutex or a
// FairMutex), for the liveness monitor.
type waiter struct {
	id     int64
	client int
	form   string
	start  time.Time
	ctx    context.Context
	expiry time.Duration
}

// nameState is what the liveness monitor knows of one lock name.
type nameState struct {
	occupied  int       // recs that may hold it
	uncertain time.Time // until then its key may still be held by a lost lease
	freeSince time.Time // when occupied last dropped to 0 (or uncertainty ended)
	waiters   map[int64]*waiter
	flagged   bool // the current free interval was reported
}

// fault is one injected fault and when it acted.
type fault struct {
	kind       string
	client     int
	start, end time.Time
	label      string // how reports name it: its kind and the call it acted on
}

// name is how reports name f.
func (f fault) name() string {
	if f.label != "" {
		return f.label
	}
	return f.kind
}

// keptData are the redis-server arguments of the servers TestSchedule
// restarts: their data outlives a restart (a second of writes aside).
var keptData = []string{"--appendonly", "yes", "--appendfsync", "no"}

// schedEnv is a deployment schedules run on, a Client of it that inspects
// the locks, and the highest token delivered per exclusive resource on it
// (tokens rise per deployment).
type schedEnv struct {
	e        *env
	observer *Client
	last     map[string]uint64
}

// world is the model and the counters of TestSchedule.
type world struct {
	t    *testing.T
	seed uint64
	// e is the deployment of the current schedule, observer a Client of
	// it (direct, for Inspect); envs are the deployments made so far, by
	// kind: the standalone server, and the Cluster once a schedule needs
	// it.
	e        *env
	observer *Client
	envs     map[string]*schedEnv
	// pair is the primary and replica of the current schedule, when it
	// runs on one (made for it, stopped after it), or nil.
	pair   *replicaPair
	begin  time.Time
	nextID atomic.Int64

	lh *lockHistory // the lock model's history of the current schedule
	// owners counts the live leases of each owner id, for the reply
	// faults that act on re-entries.
	owners sync.Map // owner id -> *atomic.Int64
	// bg runs the checks of a schedule that outlive their actor: a lease
	// left to expire is checked for expiry before the Clients close.
	bg sync.WaitGroup
	// leftToExpire holds the owner ids of the leases the schedule left to
	// expire (detached, or lost and not unlocked): their keys may be
	// found after Close.
	leftToExpire sync.Map
	// lostOwners holds, by owner id, when the loss of a lease was seen
	// (watchRenewals).
	lostOwners sync.Map
	// stop is closed when the current schedule's actors are told to stop;
	// guarded by mu.
	stop chan struct{}

	mu   sync.Mutex // the model
	held map[string][]*rec
	last map[string]uint64 // highest token delivered per exclusive resource on the current deployment
	// forcing: the ForceUnlocks of each name, called at [0] and returned
	// at [1] (zero while on their way).
	forcing map[string][]*[2]time.Time
	names   map[string]*nameState
	faults  []fault
	sizes   map[string]int // semaphore sizes
	unsure  []*rec         // leases whose Unlock failed in this schedule
	// fo is the current schedule's failover, or nil; unlocking: the
	// Unlocks of each owner in this schedule, called at [0] and returned
	// at [1] (zero while on their way); lapsedOverlaps: deliveries that
	// overlapped a lease a failover may have taken.
	fo             *failoverMark
	unlocking      map[string][]*[2]time.Time
	lapsedOverlaps []overlapAfterFailover
	recs           []*rec // every lease delivered in this schedule, while one runs on a replica
	// schedClients and schedTargets are the current schedule's Clients
	// and their targets, by Client.
	schedClients []*schedClient
	schedTargets [][]*target
	// cohortGrants: when the acquisition in Redis of each holder of a
	// cohort was sent (cohortTook).
	cohortGrants sync.Map // *holder -> time.Time

	vmu        sync.Mutex // counters and violations; never held while calling the library
	violations map[string][]string
	acquired   map[string]int64
	attempts   map[string]int64
	failures   map[string]int64
	faultCount map[string]int
	lostBy     map[string]int
	passedOn   map[string]int64 // Metrics.PassedOn, by primitive
	logged     map[string]int64 // the Clients' warnings and errors, by message
	// afterRestart: locks held once every Client of a schedule with a
	// restart closed.
	afterRestart []string
	early        []string
	modelChecked [3]int // ownerships, re-entries, ForceUnlocks the lock model checked
	modelTook    time.Duration
	schedules    int
	onEnv        map[string]int64 // schedules by the kind of deployment they ran on
	totalAcq     int64
}

// newWorld returns the world of TestSchedule, whose standalone schedules
// run on e.
func newWorld(t *testing.T, e *env, seed uint64) *world {
	w := &world{
		t: t, seed: seed, envs: map[string]*schedEnv{}, begin: time.Now(),
		held: map[string][]*rec{}, unlocking: map[string][]*[2]time.Time{}, forcing: map[string][]*[2]time.Time{}, names: map[string]*nameState{},
		sizes:      map[string]int{"s:0": 3, "s:1": 2},
		violations: map[string][]string{}, acquired: map[string]int64{}, attempts: map[string]int64{},
		failures: map[string]int64{}, faultCount: map[string]int{}, lostBy: map[string]int{},
		passedOn: map[string]int64{}, logged: map[string]int64{}, onEnv: map[string]int64{},
	}
	w.envs["standalone"] = w.prepare(e)
	return w
}

// prepare returns e as a deployment of the schedules: with a Client that
// inspects its locks, and the semaphores sized.
func (w *world) prepare(e *env) *schedEnv {
	t := w.t
	obs, err := Dial(rueidis.ClientOption{InitAddress: e.addrs, DisableCache: true}, WithPrefix("sched"), WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := withTimeout(t, 10*time.Second)
	for name, size := range w.sizes {
		if _, err := obs.Semaphore(name).SetSize(ctx, size); err != nil {
			t.Fatal(err)
		}
	}
	return &schedEnv{e: e, observer: obs, last: map[string]uint64{}}
}

// scheduleEnv picks the deployment of the schedule of seed: the 3-master
// Cluster one time in four, a primary with a replica one time in six,
// otherwise the standalone server. It draws from a stream of its own, so
// that a schedule on the standalone server makes the same choices as it
// did before schedules ran elsewhere.
func scheduleEnv(seed uint64) string {
	switch rand.New(rand.NewPCG(seed, 3)).IntN(12) {
	case 0, 1, 2:
		return "cluster"
	case 3, 4:
		return "replica"
	}
	return "standalone"
}

// useEnv makes the deployment of kind the current one, making it first if
// no schedule used it yet: the Cluster is started once, by the first
// schedule that runs on it, with its data kept across restarts as the
// standalone server's is.
//
// A primary with a replica is made for each schedule that runs on one;
// endEnv stops it.
func (w *world) useEnv(kind string) {
	se := w.envs[kind]
	if kind == "replica" {
		pr, err := startPair()
		if err != nil {
			w.t.Fatalf("starting a primary and its replica: %v", err)
		}
		w.pair = pr
		pr.link.SetLatency(replicaLag)
		w.t.Cleanup(pr.close)
		se = w.prepare(&env{name: kind, addrs: []string{pr.front.Addr()}, server: pr.primary})
	} else if se == nil {
		c := redistest.NewCluster(w.t, 3, 0, keptData...)
		se = w.prepare(&env{name: kind, addrs: c.Addrs(), cluster: c})
		w.envs[kind] = se
	}
	w.e, w.observer = se.e, se.observer
	w.mu.Lock()
	w.last = se.last
	w.mu.Unlock()
}

// endEnv ends the schedule's use of its deployment: a primary with a
// replica, made for it, is stopped.
func (w *world) endEnv() {
	w.mu.Lock()
	w.fo, w.unlocking, w.recs = nil, map[string][]*[2]time.Time{}, nil
	w.mu.Unlock()
	if w.pair != nil {
		w.observer.Close()
		w.pair.close()
		w.pair = nil
	}
}

// rel formats a time as milliseconds since the test began.
func (w *world) rel(at time.Time) string {
	return fmt.Sprintf("%.3fs", at.Sub(w.begin).Seconds())
}

// violation records a failed check.
func (w *world) violation(kind, format string, args ...any) {
	w.vmu.Lock()
	defer w.vmu.Unlock()
	w.violations[kind] = append(w.violations[kind], fmt.Sprintf(format, args...))
}

// countingHandler counts the warnings and errors a Client logs, by level
// and message, for the report.
type countingHandler struct{ w *world }

func (h countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.w.count(h.w.logged, r.Level.String()+" "+r.Message)
	return nil
}

func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

func (w *world) count(m map[string]int64, key string) {
	w.vmu.Lock()
	m[key]++
	w.vmu.Unlock()
}

func (w *world) totalAcquired() int64 {
	w.vmu.Lock()
	defer w.vmu.Unlock()
	return w.totalAcq
}

// faultsAround describes the faults that acted between from and to (or
// end within grace before from), for violation reports; "" when none did.
func (w *world) faultsAround(from, to time.Time, grace time.Duration) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, f := range w.faults {
		if !f.start.After(to) && !f.end.Add(grace).Before(from) {
			out = append(out, fmt.Sprintf("%s@c%d[%s..%s]", f.name(), f.client, w.rel(f.start), w.rel(f.end)))
		}
	}
	return strings.Join(out, " ")
}

// allowance is how much longer than a presence pass and its slack a waiter
// may wait for a free lock between from and to: each fault that acted then,
// or shortly before, adds its length and a recovery time, but a dropped
// message adds nothing.
func (w *world) allowanceLocked(from, to time.Time) time.Duration {
	var d time.Duration
	for _, f := range w.faults {
		var recovery time.Duration
		switch f.kind {
		case "drop-push":
			// Messages are for latency: the presence pass is what waiting
			// relies on, and the limit has one already.
		case "delay-push", "cut-subscriber":
			recovery = time.Second // a new subscription (a delay is in the fault's end)
		case "restart":
			recovery = 6 * time.Second
		default:
			recovery = 3 * time.Second
		}
		if !f.start.After(to) && !f.end.Add(recovery).Before(from) {
			d += f.end.Sub(f.start) + recovery
		}
	}
	return d
}

func lostNow(l *Lease) bool {
	select {
	case <-l.Lost():
		return true
	default:
		return false
	}
}

func (w *world) name(res string) *nameState {
	ns := w.names[res]
	if ns == nil {
		ns = &nameState{waiters: map[int64]*waiter{}, freeSince: time.Now()}
		w.names[res] = ns
	}
	return ns
}

// delivered checks a lease just delivered as held against the model and
// adds it: mutual exclusion, semaphore size, token order. It reports
// whether a ForceUnlock of one of its names may have run between its grant
// and its delivery.
func (w *world) delivered(r *rec) (forcedBefore bool) {
	granted := w.grantSent(r)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fo != nil && w.fo.killed.IsZero() {
		r.setLapse() // delivered while a failover goes on
	}
	if w.pair != nil {
		w.recs = append(w.recs, r)
	}
	now := time.Now()
	for _, res := range r.via {
		if w.forcedSinceLocked(res, granted) {
			r.forced, forcedBefore = true, true
		}
	}
	for _, res := range r.res {
		forced := w.forcedSinceLocked(res, granted)
		if forced {
			forcedBefore = true
			// A ForceUnlock of res may have run after the script that
			// granted r and before its reply came (held back): r was
			// force-unlocked before its delivery, and its Client learns
			// of that as of any forced unlock, at its next renewal or
			// about a round trip later (ForceUnlock breaks mutual
			// exclusion by design). An ownership taken since may hold,
			// with a higher token, when r is delivered: r counts as
			// forced, and the lock model (which lets the force come
			// between r's grant and its delivery) checks the order.
			r.forced = true
		}
		live := w.held[res][:0]
		for _, o := range w.held[res] {
			// A lease past its Deadline may have expired in Redis before
			// its loss is reported: it no longer counts as holding.
			dl, ok := o.lease.Deadline()
			if ok && time.Now().Before(dl) && !o.forced {
				live = append(live, o)
			}
		}
		kind, name, _ := strings.Cut(res, ":")
		permits := r.permits
		for _, o := range live {
			if forced {
				break
			}
			if w.lapsedLocked(o, now) {
				// A failover may have taken o's hold: checked again
				// once the schedule ends.
				if kind != "sem" && (r.prim != "rw-read" || o.prim != "rw-read") {
					w.lapsedOverlaps = append(w.lapsedOverlaps, overlapAfterFailover{o, fmt.Sprintf("%s %q: %s (token %d, c%d) delivered at %s while %s (token %d, c%d, delivered %s, lapsed %s) holds it",
						kind, name, r.prim, r.token, r.client, w.rel(r.at), o.prim, o.token, o.client, w.rel(o.at), w.rel(o.lapse))})
				}
				w.count(w.failures, "excused after a failover: overlap")
				continue
			}
			switch kind {
			case "sem":
				permits += o.permits
			case "rw":
				if r.prim == "rw-read" && o.prim == "rw-read" {
					continue
				}
				fallthrough
			default:
				w.violation("overlap", "%s %q: %s (token %d, c%d, delivered %s) delivered at %s while %s (token %d, c%d, delivered %s, lease %v fixed=%v) holds it; faults: %s",
					kind, name, r.prim, r.token, r.client, w.rel(r.at), w.rel(time.Now()), o.prim, o.token, o.client, w.rel(o.at), o.dur, o.fixed,
					w.faultsAroundLocked(o.at, time.Now()))
			}
		}
		if kind == "sem" && permits > w.sizes[name] {
			w.violation("semaphore-over-size", "semaphore %q: %d permits held (size %d) after c%d took %d at %s; faults: %s",
				name, permits, w.sizes[name], r.client, r.permits, w.rel(r.at), w.faultsAroundLocked(r.at.Add(-5*time.Second), r.at))
		}
		w.held[res] = append(live, r)
		if kind != "sem" && r.prim != "rw-read" {
			if prev := w.last[res]; r.token <= prev && !forced {
				w.violation("token-order", "%s %q: %s of c%d (lease %v fixed=%v, called %s) delivered at %s with token %d, not above %d delivered before; faults: %s",
					kind, name, r.prim, r.client, r.dur, r.fixed, w.rel(r.call), w.rel(r.at), r.token, prev, w.faultsAroundLocked(r.call, r.at))
			} else if r.token > prev {
				w.last[res] = r.token
			}
		}
		if kind == "mutex" || kind == "fair" {
			ns := w.name(res)
			ns.occupied++
			ns.flagged = false
		}
	}
	r.occupied = true
	return forcedBefore
}

func (w *world) faultsAroundLocked(from, to time.Time) string {
	var out []string
	for _, f := range w.faults {
		if !f.start.After(to) && !f.end.Add(3*time.Second).Before(from) {
			out = append(out, fmt.Sprintf("%s@c%d[%s..%s]", f.name(), f.client, w.rel(f.start), w.rel(f.end)))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " ")
}

// releasing takes r out of the holders: its Unlock is being called.
func (w *world) releasing(r *rec) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, res := range r.res {
		w.held[res] = slices.DeleteFunc(w.held[res], func(o *rec) bool { return o == r })
	}
}

// vacate ends r's occupation of its names for the liveness monitor; its
// keys may stay held for up to uncertain more.
func (w *world) vacate(r *rec, uncertain time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !r.occupied {
		return
	}
	r.occupied = false
	now := time.Now()
	for _, res := range r.res {
		kind, _, _ := strings.Cut(res, ":")
		if kind != "mutex" && kind != "fair" {
			continue
		}
		ns := w.name(res)
		ns.occupied--
		if u := now.Add(uncertain); u.After(ns.uncertain) {
			ns.uncertain = u
		}
		if ns.occupied == 0 {
			ns.freeSince = now
			ns.flagged = false
		}
	}
}

// waiting registers an acquisition that waits for res; the returned
// function takes it off.
func (w *world) waiting(res string, wt *waiter) func() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.name(res).waiters[wt.id] = wt
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.names[res].waiters, wt.id)
	}
}

// monitor flags, until stop, every lock name that the model says is free
// while some acquisition waits for it, alive, for longer than a presence
// pass (a third of the waiter expiry) and 2s, plus what faults add.
func (w *world) monitor(stop <-chan struct{}) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		w.mu.Lock()
		for res, ns := range w.names {
			if ns.occupied > 0 || ns.flagged || now.Before(ns.uncertain) {
				continue
			}
			from := ns.freeSince
			if ns.uncertain.After(from) {
				from = ns.uncertain
			}
			var oldest *waiter
			var expiry time.Duration
			for _, wt := range ns.waiters {
				if wt.ctx.Err() != nil {
					continue
				}
				if oldest == nil || wt.start.Before(oldest.start) {
					oldest = wt
				}
				expiry = max(expiry, wt.expiry)
			}
			if oldest == nil {
				continue
			}
			if oldest.start.After(from) {
				from = oldest.start
			}
			limit := expiry/3 + 2*time.Second + w.allowanceLocked(from, now)
			if now.Sub(from) > limit {
				ns.flagged = true
				var ws []string
				for _, wt := range ns.waiters {
					if wt.ctx.Err() == nil {
						ws = append(ws, fmt.Sprintf("c%d %s since %s (expiry %v)", wt.client, wt.form, w.rel(wt.start), wt.expiry))
					}
				}
				sort.Strings(ws)
				w.violation("stalled-waiter", "%s free in the model since %s, waited for until %s (%v, limit %v) by %d live waiters: %s; faults: %s; in Redis: %s",
					res, w.rel(from), w.rel(now), now.Sub(from).Round(time.Millisecond), limit, len(ws), strings.Join(ws, ", "),
					w.faultsAroundLocked(from.Add(-5*time.Second), now), w.redisState(res))
			}
		}
		w.mu.Unlock()
	}
}

// redisState describes what Redis holds of the lock res ("mutex:NAME" or
// "fair:NAME"): its hash, its queue and its waiters, read by the
// observer, for a violation's report.
func (w *world) redisState(res string) string {
	keys := w.lockKeysOf(res)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rc := w.observer.rc
	lock, _ := rc.Do(ctx, rc.B().Hgetall().Key(keys.lock).Build()).AsStrMap()
	pttl, _ := rc.Do(ctx, rc.B().Pttl().Key(keys.lock).Build()).AsInt64()
	queue, _ := rc.Do(ctx, rc.B().Zrange().Key(keys.queue).Min("0").Max("-1").Withscores().Build()).AsZScores()
	waiters, _ := rc.Do(ctx, rc.B().Hgetall().Key(keys.waiters).Build()).AsStrMap()
	return fmt.Sprintf("lock %q pttl %d, queue %v, waiters %q", lock, pttl, queue, waiters)
}

// lockKeysOf returns the keys of the lock res ("mutex:NAME" or
// "fair:NAME").
func (w *world) lockKeysOf(res string) lockKeys {
	kind, name, _ := strings.Cut(res, ":")
	if kind == "fair" {
		return w.observer.FairMutex(name).keys
	}
	return w.observer.keysFor(name)
}

// mutexOwner reads the owner of the Mutex name in Redis.
func (w *world) mutexOwner(name string) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		st, err := w.observer.Mutex(name).Inspect(ctx)
		return st.Owner, err
	}
}

// mutexInspect tells whether Redis shows a lease of the Mutex name as
// holding it: "" when it does, what it shows otherwise.
func (w *world) mutexInspect(name string) func(ctx context.Context, l *Lease) (string, error) {
	return func(ctx context.Context, l *Lease) (string, error) {
		st, err := w.observer.Mutex(name).Inspect(ctx)
		if err != nil || st.Owner == l.h.owner {
			return "", err
		}
		return fmt.Sprintf("owner %q token %d, not %q token %d", st.Owner, st.Token, l.h.owner, l.Token()), nil
	}
}

// schedClient is one Client of a schedule.
type schedClient struct {
	i        int
	c        *Client
	rc       rueidis.Client // the rueidis client New was given, closed after c; nil for Dial
	rf       *replyFaults   // the wrapper of rc New was given, or nil
	p        proxySet       // nil for a direct Client
	watchdog time.Duration
	inv      *invalidationLog // the invalidations of a Client made with New and DetectChanges, or nil
}

// invalidationLog counts the invalidations a rueidis client received, per
// key, as the user's OnInvalidations hook of DetectChanges: the Client's
// own hooks (voidPasses among them) ran before each one is counted.
type invalidationLog struct {
	mu  sync.Mutex
	n   map[string]int
	all int // invalidations of every key (a flush, a broken connection)
}

func (v *invalidationLog) record(keys []rueidis.RedisMessage) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if keys == nil {
		v.all++
	}
	for _, m := range keys {
		if k, err := m.ToString(); err == nil {
			v.n[k]++
		}
	}
}

// of returns how many invalidations of key were counted.
func (v *invalidationLog) of(key string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.n[key] + v.all
}

// target is one lock an actor can take, as a Client sees it.
type target struct {
	prim    string
	res     []string
	expiry  time.Duration // waiter expiry of a Mutex or FairMutex; 0 otherwise
	lease   time.Duration
	fixed   bool
	permits int
	lock    func(ctx context.Context) (*Lease, error)
	try     func(ctx context.Context) (*Lease, error)
	acquire func(ctx context.Context) <-chan *Lease
	// inspect tells whether Redis shows l as holding the lock: "" when it
	// does, what it shows otherwise.
	inspect func(ctx context.Context, l *Lease) (string, error)
	// reenter acquires the lock again with the lease's context, or is nil.
	reenter func(ctx context.Context) (*Lease, error)
	// force force-unlocks the lock (a Mutex or FairMutex), or is nil.
	force func(ctx context.Context) (bool, error)
	// owner reads the lock's owner in Redis (a Mutex or FairMutex), or is
	// nil.
	owner func(ctx context.Context) (string, error)
	// groups are this Client's groups over the lock's name (a Mutex).
	groups []*target
	// mutex is the Mutex of a Mutex target, or nil.
	mutex *Mutex
}

var (
	mutexNames = []string{"m:0", "m:1", "{g}:a", "{g}:b", "{g}:c"}
	fairNames  = []string{"f:0", "f:1"}
	rwNames    = []string{"rw:0", "rw:1"}
	semNames   = []string{"s:0", "s:1"}
)

// lockOpts picks a Mutex or FairMutex's options: a fixed lease one time in
// four, and a waiter expiry.
func lockOpts(rnd *rand.Rand, sc *schedClient, waiters bool) ([]LockOption, time.Duration, time.Duration, bool) {
	var opts []LockOption
	lease, fixed := sc.watchdog, false
	if rnd.IntN(4) == 0 {
		lease, fixed = []time.Duration{700 * time.Millisecond, 2 * time.Second, 5 * time.Second}[rnd.IntN(3)], true
		opts = append(opts, WithFixedLease(lease))
	}
	expiry := defaultWaiterExpiry
	if waiters && rnd.IntN(2) == 0 {
		expiry = []time.Duration{900 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second}[rnd.IntN(3)]
		opts = append(opts, WithWaiterExpiry(expiry))
	}
	return opts, lease, expiry, fixed
}

// localPassOpts picks a Mutex's budget of local passes: none one time in
// four, the default one time in four, otherwise a few or many passes
// within a window long enough for the Client's goroutines to meet in it.
// A Client that learns of changes only on renewal gets the default (no
// local passes) half of the time, and otherwise one or two passes within
// half a second, each of which it confirms in Redis (WithLocalPasses):
// with the same draws, whatever the Client's kind.
func localPassOpts(rnd *rand.Rand, c *Client) []LockOption {
	k := rnd.IntN(4)
	if c.LossDetection() != DetectOnChange {
		if k < 2 {
			return nil
		}
		return []LockOption{WithLocalPasses(k-1, 500*time.Millisecond)}
	}
	switch k {
	case 0:
		return []LockOption{WithLocalPasses(0, 0)}
	case 1:
		return nil
	}
	return []LockOption{WithLocalPasses([]int{1, 2, 64}[rnd.IntN(3)], []time.Duration{20 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}[rnd.IntN(3)])}
}

// targets builds the locks of one Client for a schedule.
func (w *world) targets(rnd *rand.Rand, sc *schedClient, all []*schedClient) []*target {
	c := sc.c
	var ts []*target
	for _, name := range mutexNames {
		opts, lease, expiry, fixed := lockOpts(rnd, sc, true)
		opts = append(opts, w.replicaPassOpts(rnd, sc, localPassOpts(rnd, c))...)
		m := c.Mutex(name, opts...)
		ts = append(ts, &target{
			prim: "mutex", res: []string{"mutex:" + name}, expiry: expiry, lease: lease, fixed: fixed, mutex: m,
			lock: m.Lock, try: m.TryLock, acquire: m.Acquire, reenter: m.Lock, force: m.ForceUnlock,
			owner: w.mutexOwner(name), inspect: w.mutexInspect(name),
		})
	}
	for _, name := range fairNames {
		opts, lease, expiry, fixed := lockOpts(rnd, sc, true)
		m := c.FairMutex(name, opts...)
		ts = append(ts, &target{
			prim: "fair", res: []string{"fair:" + name}, expiry: expiry, lease: lease, fixed: fixed,
			lock: m.Lock, try: m.TryLock, acquire: m.Acquire, reenter: m.Lock, force: m.ForceUnlock,
			owner: func(ctx context.Context) (string, error) {
				st, err := w.observer.FairMutex(name).Inspect(ctx)
				return st.Owner, err
			},
			inspect: func(ctx context.Context, l *Lease) (string, error) {
				st, err := w.observer.FairMutex(name).Inspect(ctx)
				if err != nil || st.Owner == l.h.owner {
					return "", err
				}
				return fmt.Sprintf("owner %q token %d, not %q token %d", st.Owner, st.Token, l.h.owner, l.h.token), nil
			},
		})
	}
	for _, name := range rwNames {
		opts, lease, _, fixed := lockOpts(rnd, sc, false)
		m := c.RWMutex(name, opts...)
		ts = append(ts, &target{
			prim: "rw-write", res: []string{"rw:" + name}, lease: lease, fixed: fixed,
			lock: m.Lock, try: m.TryLock, acquire: m.Acquire, reenter: m.Lock,
			inspect: func(ctx context.Context, l *Lease) (string, error) {
				st, err := w.observer.RWMutex(name).Inspect(ctx)
				if err != nil || st.Writer == l.h.owner {
					return "", err
				}
				return fmt.Sprintf("writer %q readers %d, not %q", st.Writer, st.Readers, l.h.owner), nil
			},
		}, &target{
			prim: "rw-read", res: []string{"rw:" + name}, lease: lease, fixed: fixed,
			lock: m.RLock, try: m.TryRLock, acquire: m.RAcquire, reenter: m.RLock,
			inspect: func(ctx context.Context, l *Lease) (string, error) {
				st, err := w.observer.RWMutex(name).Inspect(ctx)
				if err != nil || (st.Readers > 0 && !st.WriteLocked) {
					return "", err
				}
				return fmt.Sprintf("writer %q readers %d", st.Writer, st.Readers), nil
			},
		})
	}
	for _, name := range semNames {
		opts, lease, _, fixed := lockOpts(rnd, sc, false)
		s := c.Semaphore(name, opts...)
		n := 1 + rnd.IntN(2)
		ts = append(ts, &target{
			prim: "semaphore", res: []string{"sem:" + name}, lease: lease, fixed: fixed, permits: n,
			lock:    func(ctx context.Context) (*Lease, error) { return s.Lock(ctx, n) },
			try:     func(ctx context.Context) (*Lease, error) { return s.TryLock(ctx, n) },
			acquire: func(ctx context.Context) <-chan *Lease { return s.Acquire(ctx, n) },
			inspect: func(ctx context.Context, l *Lease) (string, error) {
				st, err := w.observer.Semaphore(name).Inspect(ctx)
				if err != nil {
					return "", err
				}
				var hs []string
				for _, h := range st.Holders {
					if h.Owner+":"+strconv.Itoa(h.Permits) == l.h.owner {
						return "", nil
					}
					hs = append(hs, h.Owner)
				}
				return fmt.Sprintf("holders %q, not %q", hs, l.h.owner), nil
			},
		})
	}
	// Groups over the Mutex names: two of this Client alone, taken by one
	// script, and one that spans this Client and the next.
	next := all[(sc.i+1)%len(all)].c
	for _, g := range []struct {
		names   []string
		clients []*Client
	}{
		{[]string{"{g}:a", "{g}:b"}, []*Client{c, c}},
		{[]string{"{g}:b", "{g}:c"}, []*Client{c, c}},
		{[]string{"{g}:c", "m:1"}, []*Client{c, next}},
	} {
		var ms []*Mutex
		var res []string
		fixed := rnd.IntN(4) == 0
		lease := sc.watchdog
		for i, name := range g.names {
			var opts []LockOption
			if fixed {
				lease = 2 * time.Second
				opts = append(opts, WithFixedLease(lease))
			}
			ms = append(ms, g.clients[i].Mutex(name, opts...))
			res = append(res, "mutex:"+name)
		}
		grp := NewGroup(ms...)
		names, clients := g.names, g.clients
		gt := &target{
			prim: "group", res: res, lease: lease, fixed: fixed,
			lock: grp.Lock, try: grp.TryLock, acquire: grp.Acquire,
			inspect: func(ctx context.Context, l *Lease) (string, error) {
				for i, name := range names {
					st, err := w.observer.Mutex(name).Inspect(ctx)
					if err != nil {
						return "", err
					}
					if st.ClientID() != clients[i].ID() || st.Token > l.Token() {
						return fmt.Sprintf("member %q: owner %q token %d; the group's Client %s token %d", name, st.Owner, st.Token, clients[i].ID(), l.Token()), nil
					}
				}
				return "", nil
			},
		}
		ts = append(ts, gt)
		// A Mutex lease of this Client over one of the names may take the
		// group with its Context.
		for i, name := range names {
			for _, mt := range ts {
				if clients[i] == c && mt.prim == "mutex" && mt.res[0] == "mutex:"+name {
					mt.groups = append(mt.groups, gt)
				}
			}
		}
	}
	return ts
}

// runSchedule runs one schedule of length d: new Clients with their own
// settings, actors on them until d, faults unless the schedule is quiet,
// then closes everything and checks that nothing is left.
func (w *world) runSchedule(n int, seed uint64, d time.Duration) {
	t := w.t
	kind := scheduleEnv(seed)
	w.useEnv(kind)
	scheduleBegan := time.Now()
	rnd := rand.New(rand.NewPCG(seed, 1))
	const nClients, perClient = 5, 4
	// A quarter of the schedules run without faults, a quarter with pub/sub
	// faults (dropped, delayed messages, cut subscriptions; a fifth of the
	// delays with the Client's presence loop stalled at once), a quarter
	// with replies held back or lost only, a quarter with every kind.
	mode := []string{"quiet", "pubsub", "replies", "all"}[rnd.IntN(4)]
	var clients []*schedClient
	var settings []string
	for i := range nClients {
		sc := &schedClient{i: i, watchdog: []time.Duration{1500 * time.Millisecond, 3 * time.Second, 30 * time.Second}[rnd.IntN(3)]}
		metrics := Metrics{
			WaitFallback: func(prim, name string) {
				now := time.Now()
				if (prim == groupPrimitive || prim == "latch") && w.faulted(i, now.Add(-3*time.Second), now, "drop-push", "delay-push", "cut-subscriber", "stall-presence") {
					// A group's or a latch's wait is timed (the holder's
					// lease, the latch's recheck); it may end before a
					// message held up or lost, or the presence pass, does.
					w.count(w.failures, prim+" wait ended by its timer after a message fault")
					return
				}
				w.violation("wait-fallback", "c%d %s %q at %s", i, prim, name, w.rel(now))
			},
			Lost: func(prim, _ string, reason error) {
				w.vmu.Lock()
				w.lostBy[prim+": "+reason.Error()]++
				w.vmu.Unlock()
			},
			PassedOn: func(prim, _ string, _ time.Duration) {
				w.vmu.Lock()
				w.passedOn[prim]++
				w.vmu.Unlock()
			},
		}
		opts := []Option{WithPrefix("sched"), WithLogger(slog.New(countingHandler{w})), WithWatchdogLease(sc.watchdog), WithMetrics(metrics)}
		if w.pair != nil {
			opts = append(opts, WithReplicaAck(1, replicaAckTimeout))
		}
		if i >= 2 { // three of five behind proxies, one per server
			p, err := newProxySet(w.e.addrs)
			if err != nil {
				t.Fatal(err)
			}
			sc.p = p
		}
		opt := sc.p.option(w.e.addrs)
		// Three ways to make a Client: Dial without client-side caching
		// (loss found on renewal, calls pipelined once they overlap), Dial
		// with it (loss found on change), and New over a caching rueidis
		// client (every call pipelined), half of the time without
		// DetectChanges (loss found on renewal), half of the time with it
		// (loss found on change: local passes, with their replies held back
		// or lost at times).
		var c *Client
		var err error
		made := []string{"dial", "dial-cache", "new"}[rnd.IntN(3)]
		// With replies held back or lost, one Client passes locks on
		// locally under them (its keeps' replies held back); on a primary
		// with a replica, one Client passes locks on locally, its keeps
		// waiting for the replica (WithReplicaAck).
		faultyPasses := (mode == "replies" || mode == "all") && i == 1
		if faultyPasses || w.pair != nil && i == 0 {
			made = "new"
		}
		switch made {
		case "new":
			detect := rnd.IntN(2) == 0 // DetectChanges: loss found on change, local passes
			if faultyPasses || w.pair != nil && i == 0 {
				detect = true
			}
			if detect {
				sc.inv = &invalidationLog{n: make(map[string]int)}
				opt.OnInvalidations = sc.inv.record
				opts = append(opts, DetectChanges(&opt))
			}
			if sc.rc, err = rueidis.NewClient(opt); err == nil {
				rc := sc.rc
				if rnd.IntN(2) == 0 || mode == "replies" || faultyPasses { // its replies held back or lost at times
					sc.rf = withReplyFaults(rc)
					rc, made = sc.rf, "new-replyfaults"
					w.watchRenewals(sc)
				}
				if detect {
					made += "-detect"
				}
				c, err = New(rc, opts...)
			}
		default:
			opt.DisableCache = made == "dial"
			c, err = Dial(opt, opts...)
		}
		if err != nil {
			t.Fatalf("schedule %d: making c%d (%s): %v", n, i, made, err)
		}
		sc.c = c
		clients = append(clients, sc)
		settings = append(settings, fmt.Sprintf("c%d (%.8s) %s watchdog %v proxied %v loss %v", i, c.ID(), made, sc.watchdog, sc.p != nil, c.LossDetection()))
	}
	var targets [][]*target
	for _, sc := range clients {
		targets = append(targets, w.targets(rnd, sc, clients))
	}
	w.mu.Lock()
	w.schedClients, w.schedTargets = clients, targets
	w.mu.Unlock()
	t.Logf("schedule %d (seed %d) at %s for %v on %s, faults %s: %s", n, seed, w.rel(time.Now()), d, kind, mode, strings.Join(settings, "; "))
	w.lh = newLockHistory(w.begin)

	stop := make(chan struct{})
	w.mu.Lock()
	w.stop = stop
	w.mu.Unlock()
	var wg sync.WaitGroup
	monitorStop := make(chan struct{})
	monitorDone := make(chan struct{})
	go func() { defer close(monitorDone); w.monitor(monitorStop) }()
	presenceDone := make(chan struct{})
	go func() { defer close(presenceDone); w.presenceMonitor(clients, monitorStop) }()
	for _, sc := range clients {
		for g := range perClient {
			actorSeed := rnd.Uint64()
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.actor(rand.New(rand.NewPCG(actorSeed, uint64(g))), sc, targets[sc.i], stop)
			}()
		}
	}
	w.plainCrowds(seed, clients, targets, stop, &wg)
	w.lateMessages(seed, n, time.Now().Add(d), stop, &wg)
	w.heldReplies(seed, n, time.Now().Add(d), stop, &wg)
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		if mode != "quiet" {
			w.injectFaults(rand.New(rand.NewPCG(rnd.Uint64(), 2)), clients, stop, mode)
		}
	}()
	time.Sleep(d)
	close(stop)
	stopped := time.Now()
	<-faultsDone
	wg.Wait()
	actorsDone := time.Now()
	w.bg.Wait()
	bgDone := time.Now()
	close(monitorStop)
	<-monitorDone
	<-presenceDone
	for _, sc := range clients {
		if sc.p != nil {
			sc.p.Heal()
		}
		if sc.rf != nil {
			sc.rf.clear()
		}
	}
	for _, sc := range clients {
		if err := sc.c.Close(); err != nil {
			t.Errorf("closing c%d: %v", sc.i, err)
		}
		if sc.rc != nil {
			sc.rc.Close()
		}
		if sc.p != nil {
			sc.p.Close()
		}
	}
	closed := time.Now()
	w.checkNothingLeft(n)
	w.checkNothingHeld(n, clients, scheduleBegan)
	w.checkLapsedOverlaps()
	w.checkLocks(fmt.Sprintf("schedule %d", n), seed)
	w.endEnv()
	t.Logf("schedule %d ended: actors and faults %v after the stop, expiry checks %v, Close %v, final checks %v",
		n, actorsDone.Sub(stopped).Round(time.Millisecond), bgDone.Sub(actorsDone).Round(time.Millisecond),
		closed.Sub(bgDone).Round(time.Millisecond), time.Since(closed).Round(time.Millisecond))
	w.mu.Lock()
	unsure := w.unsure
	w.held, w.names, w.unsure = map[string][]*rec{}, map[string]*nameState{}, nil
	w.mu.Unlock()
	w.cohortGrants.Clear()
	for _, r := range unsure {
		// Close released it, or it says it was lost.
		w.count(w.failures, fmt.Sprintf("lease whose Unlock failed: Lost closed after Close=%v", lostNow(r.lease)))
	}
	w.vmu.Lock()
	w.schedules++
	w.onEnv[kind]++
	w.vmu.Unlock()
}

// checkNothingLeft checks that no key of the schedules lacks an expiry (but
// a semaphore's size and a latch's count, which are kept until changed)
// and, once the Clients are closed, nobody subscribes.
func (w *world) checkNothingLeft(n int) {
	keys, err := w.eachKey(`local kind = string.match(k, '^[^:]*:([^:]*):')
if redis.call('PTTL', k) == -1 and kind ~= 'sem' and kind ~= 'latch' then out[#out + 1] = k end`)
	if err != nil {
		w.t.Errorf("schedule %d: scanning keys: %v", n, err)
	} else if len(keys) > 0 {
		var shown []string
		for _, kl := range keys {
			srv, k := kl.srv, kl.line
			typ, _ := srv.Do("TYPE", k)
			val := ""
			if typ == "hash" {
				val, _ = srv.Do("HGETALL", k)
			} else if typ == "zset" {
				val, _ = srv.Do("ZRANGE", k, "0", "-1", "WITHSCORES")
			}
			shown = append(shown, fmt.Sprintf("%q (%s: %q)", k, typ, val))
		}
		w.violation("key-without-ttl", "after schedule %d: %s", n, strings.Join(shown, ", "))
	}
	var left []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		left = w.e.channels(w.t)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(left) > 0 {
		w.violation("subscription-left", "after schedule %d, 10s after its Clients closed: %q", n, left)
	}
}

// keyLine is a line of eachKey's output, and the server it came from.
type keyLine struct {
	srv  *redistest.Server
	line string
}

// eachKey runs body, a Lua block, for each key k of the schedules, in one
// script on each server that holds data (each master of a Cluster: a script
// that declares no keys runs on the node it is sent to, over the keys of
// its own slots), and returns the lines of the lists out that body appends
// to.
func (w *world) eachKey(body string) ([]keyLine, error) {
	var out []keyLine
	for _, srv := range w.e.masters() {
		r, err := srv.Do("EVAL", `local out = {}
local cursor = '0'
repeat
  local r = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = r[1]
  for _, k in ipairs(r[2]) do
`+body+`
  end
until cursor == '0'
return out`, "0", "sched:*")
		if err != nil {
			return out, fmt.Errorf("%s: %w", srv.Addr, err)
		}
		for _, l := range strings.Split(r, "\n") {
			if l != "" {
				out = append(out, keyLine{srv, l})
			}
		}
	}
	return out, nil
}

// checkNothingHeld reports the Mutex and FairMutex locks still held once
// every Client of schedule n closed: Close releases every live lease's
// lock, and a lease lost without its Client seeing the key go is released
// by its Unlock or by Close; a lease left to expire (detached, or lost and
// never unlocked) is not reported. Such a lock is deleted, so that the next
// schedule, whose model knows nothing of it, starts free.
func (w *world) checkNothingHeld(n int, clients []*schedClient, began time.Time) {
	defer w.leftToExpire.Clear()
	held, err := w.eachKey(heldLocksScript(true))
	if err != nil {
		w.t.Errorf("schedule %d: scanning held locks: %v", n, err)
		return
	}
	var shown []string
	for _, kl := range held {
		line := kl.line
		f := strings.Fields(line)
		if len(f) != 3 {
			shown = append(shown, line)
			continue
		}
		if _, left := w.leftToExpire.Load(f[1]); left {
			continue // detached, or lost and never unlocked: it expires
		}
		who := "a Client of no schedule"
		for _, sc := range clients {
			if clientIDOf(f[1]) == sc.c.ID() {
				who = fmt.Sprintf("c%d", sc.i)
			}
		}
		shown = append(shown, fmt.Sprintf("%s by %s (%s), pttl %sms", f[0], f[1], who, f[2]))
	}
	if len(shown) == 0 {
		return
	}
	line := fmt.Sprintf("after schedule %d, every Client closed: %s; faults: %s", n, strings.Join(shown, ", "), w.faultsAround(began, time.Now(), 0))
	if w.faulted(-1, began, time.Now(), "restart") {
		// A restart can bring back a lock whose release it lost, and fail
		// the undoing of an attempt it interrupted (logged: it expires
		// with its lease).
		w.vmu.Lock()
		w.afterRestart = append(w.afterRestart, line)
		w.vmu.Unlock()
		return
	}
	w.violation("held-after-close", "%s", line)
}

// heldLocksScript is the body for eachKey that lists the lock hashes
// (Mutex, FairMutex) with an owner, as "KEY OWNER PTTL", and deletes them
// when del.
func heldLocksScript(del bool) string {
	body := `if redis.call('TYPE', k).ok == 'hash' then
  local owner = redis.call('HGET', k, 'owner')
  if owner and owner ~= '' then
    out[#out + 1] = k .. ' ' .. owner .. ' ' .. redis.call('PTTL', k)
`
	if del {
		body += "    redis.call('DEL', k)\n"
	}
	return body + "  end\nend"
}

// faulted reports whether a fault of one of kinds acted on Client i (any
// Client for -1) between from and to.
func (w *world) faulted(i int, from, to time.Time, kinds ...string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.faults {
		if (i < 0 || f.client == i) && slices.Contains(kinds, f.kind) && !f.start.After(to) && !f.end.Before(from) {
			return true
		}
	}
	return false
}

// randomTimeout is an acquisition's deadline: from 5ms to 3s, mostly short,
// and one time in ten from 2.5s to 4s.
func randomTimeout(rnd *rand.Rand) time.Duration {
	if rnd.IntN(10) == 0 {
		return time.Duration(2500+rnd.IntN(1500)) * time.Millisecond
	}
	return time.Duration(float64(5*time.Millisecond) * float64(rnd.IntN(600)+1) * rnd.Float64())
}

// actor runs random operations on the Client's locks until stop.
func (w *world) actor(rnd *rand.Rand, sc *schedClient, ts []*target, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		if rnd.IntN(20) == 0 {
			w.latchOp(rnd, sc)
			continue
		}
		if rnd.IntN(10) == 0 {
			w.crowd(rnd, sc, ts, stop)
			continue
		}
		if rnd.IntN(60) == 0 {
			w.strayForce(rnd, sc, ts)
			continue
		}
		t := ts[rnd.IntN(len(ts))]
		if rnd.IntN(2) == 0 { // half the time a Mutex or FairMutex: the locks with queues
			t = ts[rnd.IntN(len(mutexNames)+len(fairNames))]
		}
		w.acquireOnce(rnd, sc, t)
	}
}

// latchOp sets, counts down or waits on the Client's latch.
func (w *world) latchOp(rnd *rand.Rand, sc *schedClient) {
	l := sc.c.Latch("l:0")
	ctx, cancel := context.WithTimeout(context.Background(), randomTimeout(rnd))
	defer cancel()
	var err error
	op := []string{"set", "countdown", "wait"}[rnd.IntN(3)]
	switch op {
	case "set":
		_, err = l.TrySetCount(ctx, 1+rnd.IntN(3))
	case "countdown":
		_, err = l.CountDown(ctx)
	default:
		ce := endOf(ctx)
		err = l.Wait(ctx)
		w.returnedInGrace(ce, sc.i, "latch Wait")
	}
	w.count(w.attempts, "latch "+op)
	if err != nil {
		w.count(w.failures, "latch "+op+": "+errClass(err))
	} else {
		w.count(w.acquired, "latch "+op)
	}
}

// errClass names an error for the counts.
func errClass(err error) string {
	for _, e := range []error{context.DeadlineExceeded, context.Canceled, ErrLocked, ErrNoPermits, ErrClosed,
		ErrConnectionLost, ErrExpired, ErrTakenOver, ErrNotHeld} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	msg := err.Error()
	if len(msg) > 90 {
		msg = msg[:90] + "..."
	}
	return msg
}

// lostAtDelivery says why a lease of t that sc's call (called at callAt)
// delivered already lost, with err, is no violation, "" when it is one
// (or err is no loss). The lease is delivered as lost, which its Err says,
// and nothing claims it held, when a ForceUnlock ran while the call took
// the lock, or when the Client lapsed during the call (stall-watchdog): its
// grant waited for the watchdog meanwhile, and the lock may have expired
// and been taken.
//
// A lease passed on locally (l) may also have been force-unlocked shortly
// before the call: the Client passes the lock on until it hears of the
// change, about one round trip after it (longer when its messages or
// connections were faulted), and the Client whose ForceUnlock returned
// first may be faster to reach than the holder's (see cohort). A pass made
// later than that, or lost otherwise, is a violation.
func (w *world) lostAtDelivery(sc *schedClient, t *target, l *Lease, callAt time.Time, err error) string {
	heard := 300 * time.Millisecond
	if w.faulted(sc.i, callAt.Add(-5*time.Second), callAt, "pause-conn", "pause-client", "latency", "drop-push", "delay-push", "cut-subscriber") {
		heard = 5 * time.Second
	}
	switch {
	case err == nil || !lossReason(err):
		return ""
	case errors.Is(err, ErrForceUnlocked) && w.forcedSince(t.res, callAt):
		return "delivered already force-unlocked, a ForceUnlock during the call"
	case errors.Is(err, ErrForceUnlocked) && passedLocally(l) && w.forcedSince(t.res, callAt.Add(-heard)):
		return "passed on locally already force-unlocked, before the Client heard of a ForceUnlock just before the call"
	case w.stalled(sc.i, callAt, time.Now()):
		return "delivered already lost, its Client lapsed during the call"
	}
	return ""
}

// lossReason reports whether err is one of the reasons a held lease is lost.
func lossReason(err error) bool {
	return errors.Is(err, ErrExpired) || errors.Is(err, ErrTakenOver) || errors.Is(err, ErrConnectionLost)
}

// acquireOnce makes one acquisition of t in a random form, and, when it
// succeeds, checks it, maybe re-enters, holds it a moment and unlocks it.
func (w *world) acquireOnce(rnd *rand.Rand, sc *schedClient, t *target) {
	timeout := randomTimeout(rnd)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if rnd.IntN(5) == 0 {
		stopCancel := time.AfterFunc(time.Duration(rnd.Int64N(int64(timeout))), cancel)
		defer stopCancel.Stop()
	}
	form := []string{"Lock", "TryLock", "Acquire"}[rnd.IntN(3)]
	w.count(w.attempts, t.prim+" "+form)
	callAt := time.Now()
	if form != "TryLock" && t.expiry > 0 {
		wt := &waiter{id: w.nextID.Add(1), client: sc.i, form: t.prim + "." + form, start: time.Now(), ctx: ctx, expiry: t.expiry}
		defer w.waiting(t.res[0], wt)()
	}
	var l *Lease
	var err error
	ce := endOf(ctx)
	switch form {
	case "Lock":
		l, err = t.lock(ctx)
	case "TryLock":
		l, err = t.try(ctx)
	default:
		select {
		case l = <-t.acquire(ctx):
			err = l.Err()
			if why := w.lostAtDelivery(sc, t, l, callAt, err); why != "" {
				w.count(w.failures, t.prim+" "+form+": "+why)
			} else if err != nil && lossReason(err) {
				w.violation("delivered-lost", "%s %v Acquire of c%d delivered a lease already lost at %s: %v; faults: %s",
					t.prim, t.res, sc.i, w.rel(time.Now()), err, w.faultsAround(time.Now().Add(-5*time.Second), time.Now(), 0))
				return
			}
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	w.returnedInGrace(ce, sc.i, t.prim+" "+form)
	if err != nil {
		w.waitEnded(t, form, err)
		w.count(w.failures, t.prim+" "+form+": "+errClass(err))
		return
	}
	at := time.Now()
	if e := l.Err(); e != nil {
		if why := w.lostAtDelivery(sc, t, l, callAt, e); why != "" {
			w.count(w.failures, t.prim+" "+form+": "+why)
			return
		}
		w.violation("delivered-lost", "%s %v %s of c%d returned a lease at %s whose Err is %v; faults: %s",
			t.prim, t.res, form, sc.i, w.rel(at), e, w.faultsAround(at.Add(-5*time.Second), at, 0))
		return
	}
	w.checkLeaseAhead(t, l, sc.i, at)
	r := &rec{
		id: w.nextID.Add(1), prim: t.prim, res: t.res, client: sc.i, lease: l, token: l.Token(),
		permits: t.permits, dur: t.lease, at: at, call: callAt, fixed: t.fixed, done: make(chan struct{}),
	}
	w.vmu.Lock()
	w.acquired[t.prim]++
	w.totalAcq++
	w.vmu.Unlock()
	w.cohortTook(l)
	w.checkPassToken(t, l, sc.i)
	forcedBefore := w.delivered(r)
	w.checkOnReplica(r)
	w.trackOwner(l, 1)
	if modeled(t.prim) {
		r.life = w.lh.acquired(sc.i, r.token, t.fixed, callAt, at, t.res, nil)
		w.lh.track(r.life, l)
		if forcedBefore {
			w.lh.lostBeforeDelivery(r.life, w.grantSent(r))
		}
	}
	w.bg.Add(1)
	go w.watchLoss(r)

	// Held in Redis: Inspect, from another Client, shows it.
	ictx, icancel := context.WithTimeout(context.Background(), 3*time.Second)
	shows, ierr := t.inspect(ictx, l)
	icancel()
	w.mu.Lock()
	forcedNow := r.forced
	w.mu.Unlock()
	// The promise: a delivered lease is held in Redis, unless a ForceUnlock
	// ran during the call (forcedSince), which may have ended the hold
	// between its grant and its delivery whatever the moment its Client
	// counts the grant from (a hand-over's is the release, as the server's
	// clock places it), or since (forcedNow).
	if ierr == nil && shows != "" && !lostNow(l) && !forcedNow && !w.forcedSince(t.res, callAt) && !w.excusedByFailover(r, time.Now(), "not held at delivery") {
		w.violation("not-held-at-delivery", "%s %v of c%d (token %d, lease %v fixed=%v) delivered at %s but Redis shows %s at %s; faults: %s",
			t.prim, t.res, sc.i, r.token, t.lease, t.fixed, w.rel(at), shows, w.rel(time.Now()), w.faultsAround(at.Add(-5*time.Second), time.Now(), 0))
	}
	w.lh.witness(r.life, l)

	// Re-entries and groups over the lease's Context run beside the hold
	// and may outlive it: the lock stays held until the last of them ends.
	var beside sync.WaitGroup
	if t.reenter != nil && rnd.IntN(5) == 0 {
		outlive, cancellable := rnd.IntN(2) == 0, rnd.IntN(2) == 0
		childHold := time.Duration(rnd.IntN(3)) * time.Millisecond
		if outlive {
			childHold = time.Duration(rnd.IntN(300)) * time.Millisecond
			beside.Add(1)
			go func() {
				defer beside.Done()
				w.reenterOnce(t, r, sc, cancellable, childHold)
			}()
		} else {
			w.reenterOnce(t, r, sc, cancellable, childHold)
		}
	}
	if len(t.groups) > 0 && rnd.IntN(groupChance(l)) == 0 {
		g := t.groups[rnd.IntN(len(t.groups))]
		gHold := time.Duration(rnd.IntN(50)) * time.Millisecond
		if rnd.IntN(2) == 0 && (!passedLocally(l) || rnd.IntN(2) == 0) {
			// (A lease passed on locally has its Group released before
			// its own Unlock three times in four: that Unlock may pass the
			// lock on again, after the Group raised its token.)
			beside.Add(1)
			go func() {
				defer beside.Done()
				w.groupWithLease(g, t, r, sc, gHold)
			}()
		} else {
			w.groupWithLease(g, t, r, sc, gHold)
		}
	}

	hold := time.Duration(rnd.IntN(20)) * time.Millisecond
	if rnd.IntN(20) == 0 {
		hold = time.Duration(100+rnd.IntN(400)) * time.Millisecond
		if w.pair != nil {
			// Long enough to span a failover, which the lock must
			// outlive (WithReplicaAck).
			hold = 5 * hold
		}
	} else if !t.fixed && t.lease <= 3*time.Second && rnd.IntN(30) == 0 {
		// Held through the faults: renewed a few times, and long enough
		// for a fault to take it from its Client.
		hold = time.Duration(1000+rnd.IntN(2000)) * time.Millisecond
	}
	hold = overstay(rnd, t, hold)
	time.Sleep(hold / 2)
	// Mid-hold: Extend a fixed lease, Detach it, or force-unlock the lock.
	// Detach leaves the lock held up to a lease: rarer, not to starve the
	// schedule.
	switch mid := rnd.IntN(60); {
	case mid < 2 && t.fixed && t.prim != "group":
		d := []time.Duration{300 * time.Millisecond, time.Second, 2 * time.Second}[rnd.IntN(3)]
		ectx, ecancel := context.WithTimeout(context.Background(), 3*time.Second)
		var err error
		what := t.prim + " extend"
		if dl, ok := l.Deadline(); ok && sc.rf != nil && time.Until(dl) < 3*time.Second && rnd.IntN(2) == 0 {
			// At the end, its reply held until the lease ran out.
			d, what = 2*time.Second, t.prim+" extend at the end, reply held"
			err = w.extendAtEnd(sc, l, d)
		} else {
			err = w.extend(ectx, sc, t, l, d)
		}
		ecancel()
		w.extended(t, l, sc.i, d, err, "returned")
		w.count(w.attempts, what)
		if err != nil {
			w.count(w.failures, t.prim+" extend: "+errClass(err))
		} else {
			r.dur = max(r.dur, d)
		}
	case mid == 2 && t.owner != nil && r.dur <= 3*time.Second:
		w.count(w.attempts, t.prim+" detach")
		w.lh.stopping(r.life, time.Now())
		if err := l.Detach(); err != nil {
			w.count(w.failures, t.prim+" detach: "+errClass(err))
			break
		}
		w.releasing(r)
		w.vacate(r, r.dur+time.Second)
		beside.Wait()
		w.leaveToExpire(t, r, sc, time.Now(), "detached")
		close(r.done)
		return
	case mid < 5 && t.force != nil:
		w.forceUnlock(t, sc)
	}
	time.Sleep(hold - hold/2)
	w.lh.witness(r.life, l)

	w.releasing(r)
	if lostNow(l) && t.owner != nil && r.dur <= 5*time.Second && rnd.IntN(2) == 0 {
		// A lost lease nobody unlocks: its key must expire within its
		// lease, not stay renewed.
		beside.Wait()
		w.leaveToExpire(t, r, sc, time.Now(), "lost ("+errClass(l.Err())+")")
		close(r.done)
		return
	}
	// The lease's own deadline, not the lease it was asked with: a lock
	// handed over at a release holds only the hand-over lease until its
	// first renewal.
	deadline, deadlineOK := l.Deadline()
	lostBefore := lostNow(l)
	how := rnd.IntN(12)
	if how >= 9 && sc.rf != nil && t.fixed {
		how = 2 // a fixed lease due soon: its Client may lapse over it
	}
	// A lease held past its deadline, or lost: what Redis shows before
	// its Unlock (schedule_overrun_test.go).
	var elsewhere string
	var seen time.Time
	if lostBefore || hold > t.lease {
		elsewhere, seen = w.notHeldNow(t, l)
	}
	uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
	began := time.Now()
	var twice string
	switch how {
	case 0: // two Unlocks at once
		errs := make(chan error, 1)
		go func() { errs <- w.unlockLease(l, r.life, uctx) }()
		err = w.unlockLease(l, r.life, uctx)
		other := <-errs
		if err == nil && other == nil {
			// Both found the release mark of the one that freed it: a
			// retry's answer.
			w.count(w.acquired, t.prim+" unlock twice at once: both nil")
		}
		if err != nil {
			err = other
		}
		w.count(w.attempts, t.prim+" unlock twice at once")
	case 1: // retried
		err = w.unlockLease(l, r.life, uctx)
		again := w.unlockLease(l, r.life, uctx)
		if err == nil && again == nil {
			twice = "an Unlock retried after it returned nil"
		}
		if err != nil {
			err = again
		}
		w.count(w.attempts, t.prim+" unlock retried")
	case 2: // its first reply lost, retried (schedule_overrun_test.go)
		if sc.rf != nil && t.owner != nil {
			err = w.unlockAfterLostReply(sc, t, l, r.life, uctx)
			break
		}
		err = w.unlockLease(l, r.life, uctx)
	default:
		err = w.unlockLease(l, r.life, uctx)
	}
	returned := time.Now()
	took := returned.Sub(began)
	ucancel()
	w.unlockedAfterLoss(t, sc, l, elsewhere, seen, err)
	if twice != "" {
		w.violation("unlock-twice-nil", "%s %v of c%d (token %d, delivered %s): %s both returned nil at %s",
			t.prim, t.res, sc.i, r.token, w.rel(at), twice, w.rel(returned))
	}
	w.mu.Lock()
	forced := r.forced
	w.mu.Unlock()
	switch {
	case err == nil:
		w.vacate(r, 0)
	case errors.Is(err, ErrNotHeld):
		if !lostBefore && !forced && deadlineOK && returned.Before(deadline) {
			w.unlockFoundItGone(t, r, at, began, returned, deadline, took, err)
		}
		w.count(w.failures, t.prim+" unlock: "+errClass(err))
		w.vacate(r, 0)
	default:
		w.count(w.failures, t.prim+" unlock: "+errClass(err))
		w.vacate(r, t.lease+time.Second)
		w.mu.Lock()
		w.unsure = append(w.unsure, r)
		w.mu.Unlock()
	}
	beside.Wait()
	close(r.done)
}

// unlockFoundItGone judges an Unlock of r, delivered at at, that found its
// hold gone (err) before the lease's deadline while Lost was open when it
// was called. A ForceUnlock of one of its names that returned after the
// delivery, or is on its way, explains it: the model takes r off its
// names' holders as its Unlock begins (releasing), so that one does not
// mark it forced, and its Client learns of it at its next renewal or its
// key's invalidation, a round trip later at least: a loss the Client
// cannot know yet is not silent (counted). So does a failover that may
// have lost the hold. Otherwise it is a silent loss.
func (w *world) unlockFoundItGone(t *target, r *rec, at, began, returned, deadline time.Time, took time.Duration, err error) {
	switch {
	case w.forcedSince(t.res, at):
		w.count(w.failures, t.prim+" unlock found it gone before its deadline, after a ForceUnlock since its delivery")
	case !w.excusedByFailover(r, returned, "Unlock found it gone"):
		w.violation("silent-loss", "%s %v of c%d (token %d, lease %v fixed=%v, delivered %s): Unlock at %s found it not held (%v) in %v, before the lease's deadline %s, and Lost was open when it was called; faults: %s",
			t.prim, t.res, r.client, r.token, t.lease, t.fixed, w.rel(at), w.rel(began), err, took, w.rel(deadline), w.faultsAround(at.Add(-5*time.Second), time.Now(), 0))
	}
}

// reenterOnce re-enters r's lock with its lease's Context (with or without
// the Context's cancellation), holds the re-entry for hold and unlocks it.
func (w *world) reenterOnce(t *target, r *rec, sc *schedClient, cancellable bool, hold time.Duration) {
	base := r.lease.Context()
	if !cancellable {
		base = context.WithoutCancel(base)
	}
	rctx, rcancel := context.WithTimeout(base, time.Second)
	rcall := time.Now()
	ce := endOf(rctx)
	child, err := t.reenter(rctx)
	w.returnedInGrace(ce, sc.i, t.prim+" re-entry")
	rcancel()
	w.count(w.attempts, t.prim+" re-entry")
	if err != nil {
		w.count(w.failures, t.prim+" re-entry: "+errClass(err))
		return
	}
	names, fresh := r.res, []string(nil)
	if child.Token() != r.token {
		if r.lease.Err() == nil {
			w.violation("reentry-token", "%s %v of c%d: re-entry token %d, outer %d", t.prim, t.res, sc.i, child.Token(), r.token)
		} else {
			// The outer lease ended (unlocked, passed on, lost) by the time
			// the call returned, and the call made a new acquisition with
			// a token of its own: a Context whose lease ended carries no
			// parent (leaseFrom), and a re-entry shares its parent's token.
			// The lock model checks it as a fresh ownership.
			names, fresh = nil, r.res
		}
	}
	life := w.reentered(r, child, sc.i, rcall, names, fresh)
	time.Sleep(hold)
	w.lh.witness(life, child)
	uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := w.unlockLease(child, life, uctx); err != nil {
		w.count(w.failures, t.prim+" re-entry unlock: "+errClass(err))
	}
	ucancel()
}

// groupWithLease takes group g with the Context of r, a Mutex lease over
// one of its names: the group re-enters that lock and takes the others.
func (w *world) groupWithLease(g, t *target, r *rec, sc *schedClient, hold time.Duration) {
	gctx, gcancel := context.WithTimeout(r.lease.Context(), time.Second)
	gcall := time.Now()
	ce := endOf(gctx)
	gl, err := g.lock(gctx)
	w.returnedInGrace(ce, sc.i, "group with a Mutex lease's Context")
	gcancel()
	w.count(w.attempts, "group with a Mutex lease's Context")
	if passedLocally(r.lease) {
		w.count(w.attempts, "group with the Context of a Mutex lease passed on locally")
	}
	if err == nil {
		err = gl.Err()
	}
	if err != nil {
		w.count(w.failures, "group with a Mutex lease's Context: "+errClass(err))
		return
	}
	at := time.Now()
	others := slices.DeleteFunc(slices.Clone(g.res), func(res string) bool { return res == t.res[0] })
	gr := &rec{
		id: w.nextID.Add(1), prim: "group", res: others, via: []string{t.res[0]}, client: sc.i, lease: gl, token: gl.Token(),
		dur: g.lease, at: at, call: gcall, fixed: g.fixed, done: make(chan struct{}),
	}
	w.delivered(gr)
	gr.life = w.reentered(r, gl, sc.i, gcall, []string{t.res[0]}, others)
	w.bg.Add(1)
	go w.watchLoss(gr)
	time.Sleep(hold)
	w.lh.witness(gr.life, gl)
	w.releasing(gr)
	uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
	err = w.unlockLease(gl, gr.life, uctx)
	ucancel()
	if err != nil {
		w.count(w.failures, "group with a Mutex lease's Context unlock: "+errClass(err))
		w.vacate(gr, g.lease+time.Second)
	} else {
		w.vacate(gr, 0)
	}
	close(gr.done)
}

// grantSent returns a moment before the script that granted r's lease ran:
// when the command that set its key's lease was sent, as its holder has
// it, or, for a Group's lease (whose holder spans its members), when its
// acquisition was called. For a lease passed on locally, it is the start
// of the time within which a pass may be delivered after the command that
// vouched for the hold was sent (WithLocalPasses): a pass may be delivered
// after a ForceUnlock within it.
func grantSent(r *rec) time.Time {
	l := r.lease
	h := l.h
	if h == nil || h.kind.deadline != nil {
		return r.call
	}
	if co := l.co; co != nil && l.token != 0 {
		co.mu.Lock()
		defer co.mu.Unlock()
		return r.at.Add(-co.within)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return later(r.call, h.lastOK)
}

// forcedSinceLocked reports whether a ForceUnlock of res may have run
// after call: one on its way, or one that returned after call.
func (w *world) forcedSinceLocked(res string, call time.Time) bool {
	for _, f := range w.forcing[res] {
		if f[1].IsZero() || f[1].After(call) {
			return true
		}
	}
	return false
}

// forceUnlock force-unlocks t's lock from sc: every lease the model has
// holding it is marked forced (it may lose its lock without a fault).
func (w *world) forceUnlock(t *target, sc *schedClient) {
	span := &[2]time.Time{time.Now()}
	w.mu.Lock()
	for _, o := range w.held[t.res[0]] {
		o.forced = true
	}
	// A Group that re-entered the lock through a lease's Context holds it
	// too: it loses that member.
	for _, os := range w.held {
		for _, o := range os {
			if slices.Contains(o.via, t.res[0]) {
				o.forced = true
			}
		}
	}
	w.forcing[t.res[0]] = append(w.forcing[t.res[0]], span)
	w.mu.Unlock()
	fctx, fcancel := context.WithTimeout(context.Background(), 3*time.Second)
	call := time.Now()
	_, err := t.force(fctx)
	ret := time.Now()
	w.mu.Lock()
	span[1] = ret
	w.mu.Unlock()
	w.lh.forced(t.res[0], sc.i, call, ret)
	fcancel()
	w.count(w.attempts, t.prim+" force unlock")
	if err != nil {
		w.count(w.failures, t.prim+" force unlock: "+errClass(err))
	}
}

// leaveToExpire leaves r's lease, detached or lost at since, without
// Unlock, and checks in the background, before the Clients close, that
// its key expires within its lease: the Client stops renewing it.
func (w *world) leaveToExpire(t *target, r *rec, sc *schedClient, since time.Time, why string) {
	owner := r.lease.h.owner
	w.leftToExpire.Store(owner, true)
	w.trackOwner(r.lease, -1)
	w.count(w.attempts, t.prim+" left to expire, "+why)
	w.vacate(r, r.dur+time.Second)
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		limit := r.dur + r.dur/10 + 500*time.Millisecond
		time.Sleep(time.Until(since.Add(limit)))
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		got, err := t.owner(ctx)
		// Another lease of the owner (a re-entry, a local pass) may hold
		// it on.
		if err == nil && got == owner && !w.liveOwner(owner) {
			w.violation("renewed-after-end", "%s %v of c%d (token %d, lease %v fixed=%v, delivered %s) %s at %s and left without Unlock: its key is still its own at %s (%v later); err %v; in Redis: %s; faults: %s",
				t.prim, t.res, sc.i, r.token, r.dur, r.fixed, w.rel(r.at), why, w.rel(since), w.rel(time.Now()), limit, r.lease.Err(),
				w.redisState(t.res[0]), w.faultsAround(since.Add(-5*time.Second), time.Now(), 0))
		}
	}()
}

// watchLoss waits for r's loss until its Unlock returns: a loss within
// 100ms of the delivery is counted, the liveness monitor learns that
// the lock may stay held until its key expires, and the key is checked to
// stop being renewed (checkRenewalStops). Its caller adds it to bg.
func (w *world) watchLoss(r *rec) {
	defer w.bg.Done()
	select {
	case <-r.done:
		return
	case <-r.lease.Lost():
	}
	now := time.Now()
	err := r.lease.Err()
	if h := r.lease.h; h != nil && h.kind.deadline == nil {
		w.lostOwners.Store(h.owner, now)
	}
	w.lh.lost(r.life, now, err)
	w.mu.Lock()
	forced := r.forced
	w.mu.Unlock()
	gone := errors.Is(err, ErrTakenOver) || errors.Is(err, ErrExpired) && !errors.Is(err, ErrForceUnlocked)
	unrenewed := errors.Is(err, ErrConnectionLost)
	if !r.fixed && r.dur >= 3*time.Second && !forced && (gone || unrenewed) {
		// A renewed lease whose key went while Redis answered, nothing
		// was held up and nobody forced it: something released it. Or
		// one its watchdog did not renew in time, with no connection
		// held up, no server down and no lapse of the Client: its
		// renewals did not come when they were due (every kind shares
		// the watchdog, so that is judged for all of them).
		if near := w.faultsAround(r.at.Add(-5*time.Second), now, 3*time.Second); near == "" && !modeled(r.prim) && !unrenewed {
			// Counted, not judged: shared holds (reader, permits) were seen
			// lost so, and not explained yet.
			w.count(w.failures, r.prim+" lost with no fault near: "+errClass(err))
		} else if near == "" {
			// The lock's hash names the release that freed it (r) or
			// the owner a ForceUnlock removed (f).
			w.violation("lost-without-fault", "%s %v of c%d (token %d, owner %s, hold %s, lease %v, delivered %s) lost at %s with no fault near: %v; in Redis: %s",
				r.prim, r.res, r.client, r.token, r.lease.h.owner, r.lease.hold, r.dur, w.rel(r.at), w.rel(now), err, w.redisState(r.res[0]))
		}
	}
	if now.Sub(r.at) < 100*time.Millisecond {
		line := fmt.Sprintf("%s %v of c%d (lease %v fixed=%v) lost %v after delivery at %s: %v; faults: %s",
			r.prim, r.res, r.client, r.dur, r.fixed, now.Sub(r.at).Round(time.Millisecond), w.rel(r.at), err,
			w.faultsAround(r.at.Add(-5*time.Second), now, 3*time.Second))
		w.vmu.Lock()
		w.early = append(w.early, line)
		w.vmu.Unlock()
	}
	var uncertain time.Duration
	if errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrClosed) {
		uncertain = r.dur + time.Second
	}
	w.vacate(r, uncertain)
	w.checkRenewalStops(r, now)
}

// injectFaults injects random faults until stop: on average one every
// 0.8s, each one of the kinds below (a restart at most once a schedule)
// in mode "all", only pub/sub faults in mode "pubsub", only replies held
// back or lost in mode "replies". On the Cluster, a fault of a Client's
// proxies acts on its connections to every master, and a restart is one
// master's.
func (w *world) injectFaults(rnd *rand.Rand, clients []*schedClient, stop <-chan struct{}, mode string) {
	proxied := slices.DeleteFunc(slices.Clone(clients), func(sc *schedClient) bool { return sc.p == nil })
	wrapped := slices.DeleteFunc(slices.Clone(clients), func(sc *schedClient) bool { return sc.rf == nil })
	restarted := false
	var wg sync.WaitGroup
	defer wg.Wait()
	var together []string // kinds still to inject at once on burst's Client
	var burst *schedClient
	var burstDelay time.Duration // the message delay of the current burst
	// On a primary with a replica, one of the first four faults is a
	// failover (schedule_failover_test.go).
	nth, failoverAt := 0, -1
	if w.pair != nil {
		failoverAt = 1 + rnd.IntN(4)
	}
	for {
		gap := time.Duration(rnd.ExpFloat64() * float64(800*time.Millisecond))
		if len(together) > 0 {
			gap = 0
		}
		select {
		case <-stop:
			return
		case <-time.After(min(gap, 5*time.Second)):
		}
		sc := proxied[rnd.IntN(len(proxied))]
		d := time.Duration(50+rnd.IntN(2450)) * time.Millisecond
		kinds := []string{"pause-conn", "pause-client", "latency", "drop-push", "delay-push", "cut-subscriber", "stall-presence",
			"hold-reply", "lose-reply", "restart"}
		kind := kinds[rnd.IntN(len(kinds)-1)]
		if !restarted && rnd.IntN(12) == 0 {
			kind = "restart"
		}
		switch mode {
		case "pubsub":
			kind = []string{"drop-push", "drop-push", "delay-push", "cut-subscriber"}[rnd.IntN(4)]
		case "replies":
			kind = []string{"hold-reply", "lose-reply"}[rnd.IntN(2)]
		}
		if w.pair != nil && rnd.IntN(4) == 0 {
			kind = "lag-replica" // schedule_replicalag_test.go
		}
		if w.pair != nil && kind == "restart" {
			// Its servers keep no data across a restart: the failover
			// stands in for it.
			kind = "stall-presence"
		}
		if nth++; nth == failoverAt && len(together) == 0 {
			kind = "failover"
		}
		inBurst := len(together) > 0
		switch {
		case inBurst:
			kind, together, sc = together[0], together[1:], burst
		case (mode == "all" || mode == "pubsub") && kind != "failover" && rnd.IntN(5) == 0:
			// Correlated faults on one Client: a message or a reply held
			// up, or its connection, while its presence pass stalls; with
			// pub/sub faults, its messages delayed: its waiters learn of a
			// hand-over neither way until the lock may have moved on.
			burst, inBurst = sc, true
			kind = []string{"delay-push", "pause-conn", "latency", "hold-reply"}[rnd.IntN(4)]
			if mode == "pubsub" {
				kind = "delay-push"
			}
			together = []string{"stall-presence"}
			if rnd.IntN(2) == 0 {
				together = append(together, "drop-push")
			}
			w.vmu.Lock()
			w.faultCount["correlated: "+kind+"+"+strings.Join(together, "+")]++
			w.vmu.Unlock()
		}
		if (kind == "hold-reply" || kind == "lose-reply") && (len(wrapped) == 0 || inBurst && sc.rf == nil) {
			kind = "latency"
		}
		start := time.Now()
		end := start
		counted := kind
		switch kind {
		case "pause-conn":
			open := sc.p.Open()
			if len(open) == 0 {
				continue
			}
			sc.p.PauseConn(open[rnd.IntN(len(open))], d)
			end = start.Add(d)
		case "pause-client":
			sc.p.Pause(d)
			end = start.Add(d)
		case "latency":
			sc.p.SetLatency(time.Duration(1+rnd.IntN(30)) * time.Millisecond)
			end = start.Add(d)
			wg.Add(1)
			time.AfterFunc(d, func() { defer wg.Done(); sc.p.SetLatency(0) })
		case "drop-push":
			sc.p.DropPushes(1 + rnd.IntN(3))
		case "delay-push":
			delay := time.Duration(50+rnd.IntN(950)) * time.Millisecond
			if rnd.IntN(3) == 0 {
				// Past a waiter expiry and a hand-over's lease: a message
				// that comes after the lock moved on.
				delay = time.Duration(1000+rnd.IntN(2000)) * time.Millisecond
			}
			sc.p.DelayPushes(delay)
			end = start.Add(d + delay)
			if inBurst {
				burstDelay = delay
			}
			wg.Add(1)
			time.AfterFunc(d, func() { defer wg.Done(); sc.p.DelayPushes(0) })
		case "cut-subscriber":
			sc.p.CutSubscribers()
		case "lag-replica":
			end = w.lagReplica(rnd, d, &wg)
		case "stall-presence":
			if !inBurst {
				sc = clients[rnd.IntN(len(clients))]
			} else {
				// As long as the burst's messages are delayed: the
				// Client's waiters learn of a hand-over neither way.
				d, burstDelay = max(d, burstDelay), 0
			}
			end = start.Add(d)
			wg.Add(1)
			go func() { defer wg.Done(); sc.c.pausePresence(d) }()
		case "hold-reply", "lose-reply":
			// The next few calls of one kind run in Redis and their
			// replies come late (past the lease, mostly) or never.
			if !inBurst {
				sc = wrapped[rnd.IntN(len(wrapped))]
			}
			call := replyCalls[rnd.IntN(len(replyCalls))]
			counted = kind + " " + call
			match, times := callMatcher(call, w.liveOwner), 1+rnd.IntN(3)
			forceLater := func(*replyRule) {}
			if rnd.IntN(2) == 0 {
				match, forceLater = w.forceInFlight(sc, match, stop, &wg)
			}
			var r *replyRule
			if kind == "hold-reply" {
				hold := time.Duration(500+rnd.IntN(5500)) * time.Millisecond
				if call == "keep" && rnd.IntN(2) == 0 {
					// Back within the window of the block it reserved.
					hold = time.Duration(50+rnd.IntN(450)) * time.Millisecond
				}
				r = sc.rf.hold(match, times, hold)
				end = start.Add(d + hold)
			} else {
				r = sc.rf.lose(match, times, time.Duration(rnd.IntN(200))*time.Millisecond)
				end = start.Add(d)
			}
			forceLater(r)
			wg.Add(1)
			time.AfterFunc(d, func() { defer wg.Done(); sc.rf.drop(r) })
		case "failover":
			// Recorded as it begins: the checks that look for a fault
			// near see it while it goes on.
			w.mu.Lock()
			i := len(w.faults)
			w.faults = append(w.faults, fault{kind: kind, client: -1, start: start, end: start.Add(10 * time.Second)})
			w.mu.Unlock()
			began, ended, err := w.failover(rnd)
			if err != nil {
				w.t.Errorf("failing over: %v", err)
			}
			w.mu.Lock()
			w.faults[i].start, w.faults[i].end = began, ended
			w.mu.Unlock()
			w.vmu.Lock()
			w.faultCount[kind]++
			w.vmu.Unlock()
			continue
		case "restart":
			restarted = true
			srvs := w.e.masters()
			srv := srvs[0]
			if len(srvs) > 1 {
				srv = srvs[rnd.IntN(len(srvs))]
			}
			if err := srv.Restart(); err != nil {
				w.t.Errorf("restarting Redis: %v", err)
			}
			end = time.Now()
		}
		w.mu.Lock()
		w.faults = append(w.faults, fault{kind: kind, client: sc.i, start: start, end: end, label: counted})
		w.mu.Unlock()
		w.vmu.Lock()
		w.faultCount[counted]++
		w.vmu.Unlock()
	}
}

// report logs the counts and fails the test with every violation found.
func (w *world) report(took time.Duration) {
	t := w.t
	w.vmu.Lock()
	defer w.vmu.Unlock()
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d schedules in %v, %d acquisitions\n", w.schedules, took.Round(time.Millisecond), w.totalAcq)
	writeCounts(&sb, "schedules on", w.onEnv)
	writeCounts(&sb, "acquired", w.acquired)
	writeCounts(&sb, "attempts", w.attempts)
	writeCounts(&sb, "failed", w.failures)
	faults := map[string]int64{}
	for k, v := range w.faultCount {
		faults[k] = int64(v)
	}
	writeCounts(&sb, "faults", faults)
	lost := map[string]int64{}
	for k, v := range w.lostBy {
		lost[k] = int64(v)
	}
	writeCounts(&sb, "lost (Metrics.Lost)", lost)
	writeCounts(&sb, "passed on locally (Metrics.PassedOn)", w.passedOn)
	writeCounts(&sb, "logged by the Clients", w.logged)
	fmt.Fprintf(&sb, "locks held after their Clients closed, in schedules with a restart: %d\n", len(w.afterRestart))
	for _, e := range w.afterRestart {
		fmt.Fprintf(&sb, "  %s\n", e)
	}
	fmt.Fprintf(&sb, "lock model: %d ownerships, %d re-entries, %d ForceUnlocks checked in %v\n", w.modelChecked[0], w.modelChecked[1], w.modelChecked[2], w.modelTook.Round(time.Millisecond))
	fmt.Fprintf(&sb, "leases lost within 100ms of their delivery: %d\n", len(w.early))
	for i, e := range w.early {
		if i == 10 {
			fmt.Fprintf(&sb, "  ... %d more\n", len(w.early)-i)
			break
		}
		fmt.Fprintf(&sb, "  %s\n", e)
	}
	kinds := make([]string, 0, len(w.violations))
	for k := range w.violations {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	fmt.Fprintf(&sb, "violations:")
	if len(kinds) == 0 {
		fmt.Fprintf(&sb, " none")
	}
	for _, k := range kinds {
		fmt.Fprintf(&sb, " %s=%d", k, len(w.violations[k]))
	}
	t.Log(sb.String())
	if len(kinds) == 0 {
		return
	}
	var fail strings.Builder
	for _, k := range kinds {
		vs := w.violations[k]
		fmt.Fprintf(&fail, "%s: %d\n", k, len(vs))
		for i, v := range vs {
			if i == 5 {
				fmt.Fprintf(&fail, "  ... %d more\n", len(vs)-i)
				break
			}
			fmt.Fprintf(&fail, "  %s\n", v)
		}
	}
	t.Errorf("seed %d: violations found (replay: go test -race -run '^TestSchedule$' -seed %d .):\n%s", w.seed, w.seed, fail.String())
}

func writeCounts(sb *strings.Builder, title string, m map[string]int64) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(sb, "%s:", title)
	for _, k := range keys {
		fmt.Fprintf(sb, " [%s]=%d", k, m[k])
	}
	sb.WriteString("\n")
}

// modeled reports whether the lock model checks leases of prim: the
// exclusive ones.
func modeled(prim string) bool {
	return prim == "mutex" || prim == "fair" || prim == "group" || prim == "rw-write"
}

// reentered records child, called at call, for the lock model: a hold of
// r's ownership of each of names, and a fresh ownership of each of fresh
// (a group taken with a Mutex lease's Context, or a re-entry whose parent
// ended before it was sent, which acquired the lock anew: through a local
// pass, at times). A fresh ownership that a ForceUnlock may have ended
// between its grant and its delivery is told to the model as such, as
// acquireOnce tells of the leases it gets (freshForcedBefore).
func (w *world) reentered(r *rec, child *Lease, client int, call time.Time, names, fresh []string) *leaseLife {
	if r.life == nil {
		return nil
	}
	at := time.Now()
	if child.Err() != nil {
		return nil
	}
	w.trackOwner(child, 1)
	owns := map[string]*ownership{}
	for _, res := range names {
		if o := w.lh.ownerOf(r.life, res); o != nil {
			owns[res] = o
		}
	}
	life := w.lh.acquired(client, child.Token(), r.fixed, call, at, fresh, owns)
	w.freshForcedBefore(life, child, call, at, fresh)
	w.lh.track(life, child)
	w.lh.witness(life, child)
	return life
}

// freshForcedBefore tells the lock model that a ForceUnlock may have ended
// the fresh ownerships of life (of the names fresh, child's, called at call
// and delivered at at) before their delivery: one of those names was
// force-unlocked after the grant (as grantSent places it: for a local
// pass, its block's window), and the ownership may never have held.
func (w *world) freshForcedBefore(life *leaseLife, child *Lease, call, at time.Time, fresh []string) {
	if len(fresh) == 0 {
		return
	}
	granted := w.grantSent(&rec{lease: child, call: call, at: at})
	if w.forcedSince(fresh, granted) {
		w.lh.lostBeforeDelivery(life, granted)
	}
}

// unlockLease calls l.Unlock and tells the lock model what it did.
func (w *world) unlockLease(l *Lease, life *leaseLife, ctx context.Context) error {
	lostBefore := lostNow(l)
	span := &[2]time.Time{time.Now()}
	if l.h != nil {
		w.mu.Lock()
		if w.unlocking == nil {
			w.unlocking = map[string][]*[2]time.Time{}
		}
		w.unlocking[l.h.owner] = append(w.unlocking[l.h.owner], span)
		w.mu.Unlock()
	}
	w.lh.stopping(life, span[0])
	err := l.Unlock(ctx)
	ret := time.Now()
	w.mu.Lock()
	span[1] = ret
	w.mu.Unlock()
	w.lh.unlocked(life, ret, err, lostBefore)
	if err == nil || errors.Is(err, ErrNotHeld) {
		w.trackOwner(l, -1)
	}
	return err
}

// trackOwner counts d more live leases of l's owner.
func (w *world) trackOwner(l *Lease, d int64) {
	if l.h == nil {
		return
	}
	n, _ := w.owners.LoadOrStore(l.h.owner, new(atomic.Int64))
	n.(*atomic.Int64).Add(d)
}

// liveOwner reports whether owner has live leases.
func (w *world) liveOwner(owner string) bool {
	n, ok := w.owners.Load(owner)
	return ok && n.(*atomic.Int64).Load() > 0
}

// checkLocks checks the lock model on the current history and records its
// violations, each kind on its own line of the report.
func (w *world) checkLocks(what string, seed uint64) {
	w.mu.Lock()
	restarts := restartsOf(w.faults)
	w.mu.Unlock()
	o, r, f := w.lh.counts()
	w.vmu.Lock()
	w.modelChecked[0] += o
	w.modelChecked[1] += r
	w.modelChecked[2] += f
	w.vmu.Unlock()
	began := time.Now()
	vs := w.lh.check(restarts, strings.ReplaceAll(what, " ", "-"), seed)
	w.vmu.Lock()
	w.modelTook += time.Since(began)
	w.vmu.Unlock()
	for _, v := range vs {
		w.violation(v.kind, "%s: %s", what, v.text)
	}
}
