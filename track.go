package redisync

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// LossDetection is how a Client learns that a lock it holds was lost.
type LossDetection int

const (
	// DetectOnRenewal: the watchdog finds a lost lock at its next pass,
	// every third of the watchdog lease (fixed leases are checked at the
	// same passes), and a lease whose renewals fail is reported lost a
	// tenth of its lease before it could expire. A Client made with New has
	// this mode (the rueidis.Client it is given does not tell it about
	// changes to keys) unless given DetectChanges, and so has a Client
	// dialed without client-side caching (DisableCache, or RESP2).
	DetectOnRenewal LossDetection = iota
	// DetectOnChange: in addition, Redis tells the Client when the key of
	// a lock it holds changes (server-assisted client-side caching: the
	// Client reads each key it holds once, and Redis sends an invalidation
	// when it is modified, deleted, expired or flushed, or when the
	// connection that read it breaks). The Client then checks the key at
	// once: a lock deleted, force-unlocked or taken over behind its holder
	// is reported lost about one round trip after the change, and after a
	// failover every held lock is checked as soon as the new primary
	// answers. Dial and DialURL give a Client this mode unless the
	// ClientOption disables client-side caching or asks for RESP2, and so
	// does New with the Option DetectChanges returns. It covers Mutex, FairMutex, the write
	// lock of RWMutex, and the members of Groups and Quorums; read locks and
	// Semaphore permits, whose keys are shared by every holder, are found
	// lost on renewal.
	DetectOnChange
)

// String returns "on renewal" or "on change".
func (d LossDetection) String() string {
	if d == DetectOnChange {
		return "on change"
	}
	return "on renewal"
}

// LossDetection tells how the Client learns that a lock it holds was lost.
func (c *Client) LossDetection() LossDetection {
	if c != nil && c.tracker != nil && c.tracker.on {
		return DetectOnChange
	}
	return DetectOnRenewal
}

const (
	// trackDelay is how long a lock is held before its key is read for
	// tracking: locks released sooner cost nothing, and a change in the
	// meantime is found by that read.
	trackDelay = 20 * time.Millisecond
	// trackRetry is the first pause after a tracking read that failed; it
	// doubles up to trackRetryMax (see backoff).
	trackRetry    = 20 * time.Millisecond
	trackRetryMax = 250 * time.Millisecond
	// trackCacheTTL bounds how long rueidis keeps a tracked value in its
	// client-side cache; tracking on the server outlives it.
	trackCacheTTL = time.Hour
)

// tracker asks Redis to tell the Client when the key of a held lock changes,
// and checks such a key at once. It reads each key once with CLIENT CACHING
// YES and HGET owner (rueidis DoMultiCache): the read both registers the
// key for invalidation and says whether the holder still owns it. Every
// invalidation of a held key (the Client's own renewals and releases
// included: tracking is per connection, and rueidis spreads commands over
// several) leads to a new read; a read that does not find the holder's
// owner id leads to the watchdog's check, which decides. One goroutine,
// running only while something is to be read.
type tracker struct {
	c    *Client
	on   bool
	dial *rueidis.ClientOption // how the Client dialed, to reach a node rueidis does not know yet

	mu      sync.Mutex
	keys    map[string][]*holder // tracked holders, by key
	pending []pendingTrack       // first reads, in time order
	dirty   map[string]struct{}  // keys invalidated since their last read
	all     bool                 // every key invalidated
	closed  bool
	// loop sleeps until its next read is due: a new holder's first read
	// brings its timer forward rather than waking it (see add).
	loop
}

type pendingTrack struct {
	h  *holder
	at time.Time
}

func newTracker(c *Client, on bool) *tracker {
	return &tracker{
		c: c, on: on,
		keys:  make(map[string][]*holder),
		dirty: make(map[string]struct{}),
		loop:  newLoop(),
	}
}

// add starts tracking a new holder whose kind can be tracked: its key is
// read trackDelay from now.
func (t *tracker) add(h *holder) {
	if !t.on || !h.kind.tracked {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	t.keys[h.key] = append(t.keys[h.key], h)
	at := time.Now().Add(trackDelay)
	t.pending = append(t.pending, pendingTrack{h, at})
	// Reads come due in the order of pending: the loop wakes for the first.
	if len(t.pending) == 1 {
		// Otherwise the loop wakes for an earlier one, and then looks at
		// the rest. A sleeping loop has its timer brought forward to the
		// read, rather than being woken now to set it, so that taking a
		// lock (a hand-over on its way to the waiter included) costs no
		// goroutine wake-up; the loop, once woken, takes what is due from
		// pending, this holder included. A running one may have read
		// pending already: it is kicked to look again.
		t.wakeBy(at, t.run)
	}
}

// remove stops tracking a holder.
func (t *tracker) remove(h *holder) {
	if !t.on || !h.kind.tracked {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	hs := t.keys[h.key]
	for i, x := range hs {
		if x == h {
			hs = append(hs[:i], hs[i+1:]...)
			break
		}
	}
	if len(hs) == 0 {
		delete(t.keys, h.key)
	} else {
		t.keys[h.key] = hs
	}
}

// retrack reads a holder's key again: the Client changed it, or a check
// found it held after a read that did not.
func (t *tracker) retrack(h *holder) {
	if !t.on || !h.kind.tracked {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.keys[h.key]; ok && !t.closed {
		t.dirty[h.key] = struct{}{}
		t.start()
	}
}

// invalidated is rueidis' OnInvalidations hook: keys changed, or (nil)
// every key may have (a flush, a connection that broke). It runs in a
// connection's reader: it must not block.
func (t *tracker) invalidated(keys []rueidis.RedisMessage) {
	var changed []string
	for _, m := range keys {
		if k, err := m.ToString(); err == nil {
			changed = append(changed, k)
		}
	}
	// What the Client reserved for the local passes of a changed lock is
	// no longer vouched for: of a lock a lease holds, and of one whose
	// acquisition is on its way (its cohort's lead, see cohort.lead), whose
	// key the Client may have read while it waited.
	defer t.c.voidPasses(changed, keys == nil)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || len(t.keys) == 0 {
		return
	}
	if keys == nil {
		t.all = true
	}
	held := false
	for _, k := range changed {
		if _, ok := t.keys[k]; ok {
			t.dirty[k] = struct{}{}
			held = true
		}
	}
	if keys == nil || held {
		// Keys of other locks (a waiter's cached read of a lock it waits
		// for, a lock released since) have nothing to read: the loop is
		// not woken for them.
		t.start()
	}
}

// start runs the loop, or wakes it. Call it with t.mu held.
func (t *tracker) start() { t.startOrWake(t.run) }

// close stops the loop; nothing is tracked afterwards.
func (t *tracker) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.end(&t.mu)
}

func (t *tracker) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	t.mu.Lock()
	t.useTimer(timer)
	t.mu.Unlock()
	defer func() {
		// Stopped: add no longer moves the timer.
		t.mu.Lock()
		t.awake()
		t.mu.Unlock()
	}()
	retry := backoff{first: trackRetry, limit: trackRetryMax}
	for {
		t.mu.Lock()
		t.awake() // add kicks
		t.mu.Unlock()
		hs, next := t.due(time.Now())
		if len(hs) > 0 {
			if t.read(hs) {
				retry.reset()
				continue
			}
			next = time.Now().Add(retry.next())
		}
		if next.IsZero() {
			next = time.Now().Add(time.Hour)
		}
		t.mu.Lock()
		t.sleepFor(max(time.Until(next), time.Millisecond))
		t.mu.Unlock()
		select {
		case <-t.stop:
			return
		case <-t.kick:
		case <-timer.C:
		}
	}
}

// due takes the holders whose key is to be read now, and tells when the
// next first read is due (zero when none).
func (t *tracker) due(now time.Time) (hs []*holder, next time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := make(map[*holder]bool)
	take := func(h *holder) {
		if !seen[h] {
			seen[h] = true
			hs = append(hs, h)
		}
	}
	n := 0
	for ; n < len(t.pending) && !t.pending[n].at.After(now); n++ {
		take(t.pending[n].h)
	}
	t.pending = t.pending[n:]
	// A holder released before its first read needs none: the loop does
	// not wake for it (most locks are held for less than trackDelay).
	for len(t.pending) > 0 && !slices.Contains(t.keys[t.pending[0].h.key], t.pending[0].h) {
		t.pending = t.pending[1:]
	}
	if len(t.pending) > 0 {
		next = t.pending[0].at
	}
	if t.all {
		t.all = false
		clear(t.dirty)
		for _, ks := range t.keys {
			for _, h := range ks {
				take(h)
			}
		}
	}
	for k := range t.dirty {
		delete(t.dirty, k)
		for _, h := range t.keys[k] {
			take(h)
		}
	}
	return hs, next
}

// read reads the keys of hs for tracking, and has the watchdog check the
// holders the read does not find owning their key. A holder in the middle
// of a release is read again when the release ends. It reports whether
// Redis answered; if not, the holders are read again later.
func (t *tracker) read(hs []*holder) bool {
	live := hs[:0]
	for _, h := range hs {
		h.mu.Lock()
		skip := h.done || h.releasing > 0
		h.mu.Unlock()
		if !skip {
			live = append(live, h)
		}
	}
	if len(live) == 0 {
		return true
	}
	cmds := make([]rueidis.CacheableTTL, len(live))
	for i, h := range live {
		// Pinned: rueidis recycles the commands of a DoMultiCache call that
		// failed while its connection may still be writing them.
		cmd := t.c.rc.B().Hget().Key(h.key).Field(h.trackField()).Cache().ToStaticTTL().Pin()
		cmds[i] = rueidis.CT(cmd, trackCacheTTL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(t.c.watchdog.period, time.Second))
	defer cancel()
	var check []*holder
	var failed []*holder
	for i, r := range t.c.rc.DoMultiCache(ctx, cmds...) {
		h := live[i]
		owner, err := r.ToString()
		switch {
		case err == nil && h.owns(owner):
		case err == nil || rueidis.IsRedisNil(err) || isRedisReply(err):
			check = append(check, h)
		default:
			failed = append(failed, h)
		}
	}
	if len(failed) > 0 && t.c.cluster {
		// The node that served these keys may be gone (a failover): ask
		// the others at once rather than wait for rueidis to learn the new
		// topology.
		failed = t.probe(ctx, failed)
	}
	if len(check) > 0 {
		held, unanswered := t.c.watchdog.check(ctx, check)
		failed = append(failed, unanswered...)
		for _, h := range held {
			// The read found the key changed, the check held: read again,
			// as the change may have left it untracked.
			t.mu.Lock()
			t.pending = append(t.pending, pendingTrack{h, time.Now().Add(trackDelay)})
			t.mu.Unlock()
		}
	}
	if len(failed) == 0 {
		return true
	}
	t.mu.Lock()
	for _, h := range failed {
		t.dirty[h.key] = struct{}{}
	}
	t.mu.Unlock()
	return false
}

// probeTimeout bounds each node's answer to a probe.
const probeTimeout = 200 * time.Millisecond

// probe asks every node of the Cluster it knows for the owner of each
// holder's key, and settles the holders that a node serving the key's slot
// answers for: gone or another owner is a loss, the holder's owner is
// held (read again for tracking once rueidis routes to that node). It
// returns the holders no serving node answered for.
func (t *tracker) probe(ctx context.Context, hs []*holder) (unanswered []*holder) {
	nodes := t.c.rc.Nodes()
	// A node rueidis does not know yet (a replica just promoted) is asked
	// through a connection of the probe's own.
	var own []rueidis.Client
	defer func() {
		for _, c := range own {
			c.Close()
		}
	}()
	connect := func(addr string) rueidis.Client {
		if c := nodes[addr]; c != nil || t.dial == nil {
			return c
		}
		opt := *t.dial
		opt.InitAddress, opt.ForceSingleClient, opt.DisableCache = []string{addr}, true, true
		opt.Sentinel, opt.OnInvalidations = rueidis.SentinelOption{}, nil
		c, err := rueidis.NewClient(opt)
		if err != nil {
			return nil
		}
		own = append(own, c)
		nodes[addr] = c
		return c
	}
	for _, h := range hs {
		state, ok := t.probeOne(ctx, nodes, connect, h)
		if !ok {
			unanswered = append(unanswered, h)
			continue
		}
		if t.c.watchdog.settle(ctx, h, state, time.Now(), true) {
			unanswered = append(unanswered, h)
		}
	}
	return unanswered
}

// probeOne asks the nodes for h's key's owner, following one MOVED, and
// returns the answer of a node that serves the key as a renewal script's
// state (1 held, 0 gone, 2 another owner).
func (t *tracker) probeOne(ctx context.Context, nodes map[string]rueidis.Client, connect func(addr string) rueidis.Client, h *holder) (state int64, ok bool) {
	ask := func(node rueidis.Client) (owner string, moved string, err error) {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		owner, err = node.Do(pctx, node.B().Hget().Key(h.key).Field(h.trackField()).Build()).ToString()
		if re, isRedis := rueidis.IsRedisErr(err); isRedis {
			if addr, ok := re.IsMoved(); ok {
				return "", addr, err
			}
		}
		return owner, "", err
	}
	for _, node := range nodes {
		if !serves(ctx, node) {
			continue
		}
		owner, moved, err := ask(node)
		if moved != "" {
			to := connect(moved)
			if to == nil {
				continue
			}
			owner, _, err = ask(to)
		}
		switch {
		case err == nil && h.owns(owner):
			return 1, true
		case err == nil && owner != "":
			return 2, true
		case err == nil || rueidis.IsRedisNil(err): // a free lock has an empty owner
			return 0, true
		}
	}
	return 0, false
}

// serves reports whether node is a master: a replica (which rueidis
// knows when it sends reads to replicas) may answer with a copy that lags
// behind, such as no owner yet for a lock just taken, which is no answer
// about the lock.
func serves(ctx context.Context, node rueidis.Client) bool {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	role, err := node.Do(pctx, node.B().Role().Build()).ToArray()
	if err != nil || len(role) == 0 {
		return false
	}
	kind, err := role[0].ToString()
	return err == nil && kind == "master"
}

// trackField is the field of h's lock hash that tracking reads.
func (h *holder) trackField() string {
	if h.kind.ownerField {
		return h.owner
	}
	return "owner"
}

// owns reports whether v, read from trackField, shows h holding its lock.
func (h *holder) owns(v string) bool {
	return h.kind.ownerField || v == h.owner
}

// isRedisReply reports whether err is a reply from Redis (a key of the
// wrong type), not a failure to reach it.
func isRedisReply(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}
