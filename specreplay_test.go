package redisync

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// TestSpecReplay holds the specification against the scripts: traces of
// the spec (its module replay) are played step by step on a real
// redis-server with the library's scripts, called as the library calls
// them, and after every step the keys must be what the spec's Redis state
// says: owner, holds, the order of tokens and counters, the queue and its
// entries; and every key has a TTL. A divergence fails with the trace.
//
// Left out: failovers (REPLAYABLE), which one server cannot play.
func TestSpecReplay(t *testing.T) {
	n := soak(60, 600)
	ctx := withTimeout(t, 5*time.Minute)
	e := standaloneEnv(t)
	rc := e.rueidisClient(t)
	steps := map[string]int{}
	traces, total := 0, 0
	// Batches of traces until every kind of step was replayed (some are
	// rare in a random walk), or five batches.
	for batch := 0; batch < 5 && (batch == 0 || missingSteps(steps) != nil); batch++ {
		dir := t.TempDir()
		r := runQuint(t, ctx, "replay", n, 50, filepath.Join(dir, "t_{seq}.itf.json"), "--n-traces="+strconv.Itoa(n))
		seed := r.seed
		if r.found {
			t.Fatalf("the specification broke an invariant (seed %s):\n%s", seed, r.out)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "t_*.itf.json"))
		if len(files) == 0 {
			t.Fatalf("quint wrote no trace (seed %s):\n%s", seed, r.out)
		}
		for _, f := range files {
			tr := readITF(t, f)
			rp := &replayer{t: t, ctx: ctx, rc: rc, prefix: fmt.Sprintf("specreplay:%d:%d", time.Now().UnixNano(), traces),
				owners: map[int64]string{}, tokens: map[int64]int64{}, ownTokens: map[string]string{}}
			for j := 1; j < len(tr); j++ {
				st := stepOf(tr[j])
				if err := rp.play(st, tr[j]); err != nil {
					t.Fatalf("trace %s (seed %s), step %d (%s): %v\n%s", filepath.Base(f), seed, j, st, err, formatTrace(tr[:j+1]))
				}
				if err := rp.compare(tr[j]); err != nil {
					t.Fatalf("trace %s (seed %s), after step %d (%s), Redis differs from the spec: %v\n%s", filepath.Base(f), seed, j, st, err, formatTrace(tr[:j+1]))
				}
				steps[st.kind]++
				total++
				for l, now := range specLocks(tr[j]) {
					if before := specLocks(tr[j-1])[l]; now.owner != 0 && before.owner != 0 && now.owner != before.owner {
						steps["handOver"]++
					}
				}
				if len(st.expired) > 0 {
					steps["expiry"]++
				}
			}
			rp.clear()
			traces++
		}
	}
	kinds := make([]string, 0, len(steps))
	for k, c := range steps {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, c))
	}
	sort.Strings(kinds)
	t.Logf("%d traces, %d steps replayed: %s", traces, total, strings.Join(kinds, ", "))
	if m := missingSteps(steps); m != nil {
		t.Errorf("no %v step was replayed", m)
	}
}

// missingSteps are the kinds of Redis-side steps that the replay must
// cover and that steps has none of: the spec's steps, and hand-overs (a
// step that passed a lock from one owner to another) and expiries (a tick
// that made a lock's hash expire).
func missingSteps(steps map[string]int) []string {
	var out []string
	for _, k := range []string{"acquire", "reenter", "release", "keep", "handOver", "look", "renew", "presence", "force", "groupAcquire", "groupRelease", "expiry"} {
		if steps[k] == 0 {
			out = append(out, k)
		}
	}
	return out
}

// The arguments the replay calls the scripts with: leases and waiter
// expiries far longer than a trace, so that only the spec's steps make
// keys expire (a tick's expiry is a DEL) and waiters die (their Client's
// deadline is set in the past).
const (
	replayLease     = "60000"
	replayRetention = "120000"
	replayWaiter    = "60000"
)

// replayer plays one trace on a real server, under keys of its own.
type replayer struct {
	t      *testing.T
	ctx    context.Context
	rc     rueidis.Client
	prefix string
	owners map[int64]string // the spec's owner ids as the scripts see them
	// tokens maps the spec's tokens and counters to the server's: both
	// count from clocks of their own, so only their order must agree.
	tokens map[int64]int64
	// ownTokens is the server's token of each owner id's ownership, as
	// the keys showed it: what a re-entry of it claims.
	ownTokens map[string]string
}

func (r *replayer) keys(lock string) lockKeys {
	t := tagged("{g}" + lock)
	return lockKeys{lock: r.prefix + ":" + t, channel: r.prefix + ":ch:" + t, queue: r.prefix + ":q:" + t, waiters: r.prefix + ":w:" + t}
}

// owner is the owner id of the spec's owner o of Client c: "c<c>:<o>",
// the library's form (a Client id, ':' and a number).
func (r *replayer) owner(c, o int64) string {
	if s, ok := r.owners[o]; ok {
		return s
	}
	s := fmt.Sprintf("c%d:%d", c, o)
	r.owners[o] = s
	return s
}

func (r *replayer) ownerOf(o int64) string {
	s, ok := r.owners[o]
	if !ok {
		r.t.Fatalf("the trace names owner %d before any step introduced it", o)
	}
	return s
}

func hold(h int64) string { return "#" + strconv.FormatInt(h, 10) }

func (r *replayer) run(s script, keys, args []string) error {
	return s.exec(r.ctx, r.rc, keys, args).Error()
}

// play runs the step's scripts as the library runs them.
func (r *replayer) play(st specStep, after itfState) error {
	k := r.keys(st.lock)
	lockKeys3 := []string{k.lock, k.queue, k.waiters}
	reserve := func(n int64) string {
		if n == 0 {
			return ""
		}
		return strconv.FormatInt(n, 10)
	}
	var err error
	switch st.kind {
	case "client", "init":
		return nil
	case "acquire": // a new owner, its first attempt (mutex.go newAcquisition, attempt)
		o := r.owner(st.client, st.owner)
		args := acquireArgs(o, hold(st.hold), time.Minute, o, time.Minute, "first", time.Minute, nil)
		args[firstArg], args[reserveArg] = "1", reserve(st.n)
		err = r.run(acquireScript, lockKeys3, args)
	case "look": // the waiter's next attempt, with a place in the queue
		o := r.ownerOf(st.owner)
		args := acquireArgs(o, hold(st.hold), time.Minute, o, time.Minute, "queued", time.Minute, nil)
		args[firstArg], args[reserveArg] = "1", reserve(st.n)
		err = r.run(acquireScript, lockKeys3, args)
	case "reenter": // the parent's owner id, a waiter id of its own
		o := r.ownerOf(st.owner)
		args := acquireArgs(o, hold(st.hold), time.Minute, fmt.Sprintf("c%d:r%d", st.client, st.hold), time.Minute, "first", 0, nil)
		args[firstArg] = "1"
		// The parent's token: its ownership's, as the keys showed it.
		token, ok := r.ownTokens[o]
		if !ok {
			return fmt.Errorf("a re-entry of owner %s, whose token the keys never showed", o)
		}
		args[len(args)-1] = token
		err = r.run(acquireScript, lockKeys3, args)
	case "release":
		err = r.run(releaseScript, lockKeys3, []string{r.ownerOf(st.owner), hold(st.hold), replayRetention, k.channel})
	case "keep": // cohort.keep: the release with a number of tokens
		err = r.run(releaseScript, lockKeys3, []string{r.ownerOf(st.owner), hold(st.hold), replayRetention, k.channel, strconv.FormatInt(st.n, 10)})
	case "renew":
		err = r.run(renewScript, []string{k.lock}, []string{r.ownerOf(st.owner), replayLease})
	case "renewGroup":
		for _, l := range sortedLocks(st.members) {
			if err = r.run(renewScript, []string{r.keys(l).lock}, []string{r.ownerOf(st.members[l]), replayLease}); err != nil {
				break
			}
		}
	case "presence":
		err = r.run(presenceScript, []string{k.waiters, k.queue, k.lock}, []string{fmt.Sprintf("c%d", st.client), replayWaiter, "1", ""})
	case "force":
		err = r.run(forceScript, lockKeys3, []string{k.channel, replayRetention})
	case "groupAcquire": // a single attempt (group.go newAtomic)
		var keys, parents []string
		args := []string{"try"}
		for _, l := range sortedLocks(st.members) {
			lk := r.keys(l)
			keys = append(keys, lk.lock, lk.queue, lk.waiters)
			o := r.owner(st.client, st.members[l])
			args = append(args, o, hold(st.holds[l]), replayLease)
			// A member whose owner had an ownership before re-enters it.
			parents = append(parents, r.ownTokens[o])
		}
		err = r.run(groupAcquireScript, keys, append(args, parents...))
	case "groupRelease": // members.go: one hold of each member
		var keys []string
		args := []string{replayRetention}
		for _, l := range sortedLocks(st.members) {
			lk := r.keys(l)
			keys = append(keys, lk.lock, lk.queue, lk.waiters)
			args = append(args, r.ownerOf(st.members[l]), hold(st.holds[l]), lk.channel)
		}
		err = r.run(groupReleaseScript, keys, args)
	case "tick": // the lease or retention of these locks ran out
		for _, l := range st.expired {
			if err = r.rc.Do(r.ctx, r.rc.B().Del().Key(r.keys(l).lock).Build()).Error(); err != nil {
				break
			}
		}
	default:
		return fmt.Errorf("the replay does not know the step %q", st.kind)
	}
	if err != nil {
		return err
	}
	// The Clients whose deadline the spec has passed stopped renewing it:
	// the server sees it in the past.
	for l, sl := range specLocks(after) {
		lk := r.keys(l)
		for c, d := range sl.deadlines {
			if d > itfInt(after["now"]) || len(sl.queue) == 0 {
				continue
			}
			if err := r.rc.Do(r.ctx, r.rc.B().Hset().Key(lk.waiters).FieldValue().FieldValue(fmt.Sprintf("\x00cc%d", c), "1").Build()).Error(); err != nil {
				return err
			}
		}
	}
	return nil
}

func sortedLocks(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for l := range m {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

// compare checks the server's keys against the spec's Redis state.
func (r *replayer) compare(s itfState) error {
	for l, want := range specLocks(s) {
		k := r.keys(l)
		h, err := r.rc.Do(r.ctx, r.rc.B().Hgetall().Key(k.lock).Build()).AsStrMap()
		if err != nil {
			return err
		}
		if (len(h) > 0) != want.exists {
			return fmt.Errorf("%s: the hash %v, the spec's exists %v", l, h, want.exists)
		}
		if want.exists {
			owner := ""
			if want.owner != 0 {
				owner = r.ownerOf(want.owner)
			}
			if h["owner"] != owner {
				return fmt.Errorf("%s: owner %q, the spec's %q", l, h["owner"], owner)
			}
			if owner != "" {
				// The latest: an owner id that waited in the queue takes
				// the lock again under the same id after losing it.
				r.ownTokens[owner] = h["token"]
			}
			var holds []string
			for _, x := range want.holds {
				holds = append(holds, hold(x))
			}
			got := strings.Fields(h["holds"])
			sort.Strings(got)
			sort.Strings(holds)
			if strings.Join(got, " ") != strings.Join(holds, " ") {
				return fmt.Errorf("%s: holds %q, the spec's %q", l, h["holds"], holds)
			}
			if err := r.sameOrder(l+" token", want.token, h["token"]); err != nil {
				return err
			}
			if _, ok := h["t"]; ok != (want.t != 0) {
				return fmt.Errorf("%s: field t %q, the spec's t %d", l, h["t"], want.t)
			}
			if want.t != 0 {
				if err := r.sameOrder(l+" t", want.t, h["t"]); err != nil {
					return err
				}
			}
		}
		q, err := r.rc.Do(r.ctx, r.rc.B().Zrange().Key(k.queue).Min("0").Max("-1").Build()).AsStrSlice()
		if err != nil {
			return err
		}
		var wantQ []string
		for _, w := range want.queue {
			wantQ = append(wantQ, r.ownerOf(w))
		}
		if strings.Join(q, ",") != strings.Join(wantQ, ",") {
			return fmt.Errorf("%s: queue %v, the spec's %v", l, q, wantQ)
		}
		for _, w := range want.queue {
			e := want.entries[w]
			v, err := r.rc.Do(r.ctx, r.rc.B().Hget().Key(k.waiters).Field(r.ownerOf(w)).Build()).ToString()
			if err != nil {
				return fmt.Errorf("%s: the entry of waiter %s: %w", l, r.ownerOf(w), err)
			}
			f := strings.Fields(v)
			wantF := []string{replayLease, hold(e.hold), r.ownerOf(w)}
			if e.reserve > 0 {
				wantF = append(wantF, strconv.FormatInt(e.reserve, 10))
			}
			if strings.Join(f, " ") != strings.Join(wantF, " ") {
				return fmt.Errorf("%s: the entry of waiter %s is %q, the spec's %q", l, r.ownerOf(w), v, wantF)
			}
		}
		if len(h) > 0 && len(q) > 0 && h["q"] != "1" {
			return fmt.Errorf("%s: waiters in the queue, and q is %q", l, h["q"])
		}
		for _, key := range []string{k.lock, k.queue, k.waiters} {
			ttl, err := r.rc.Do(r.ctx, r.rc.B().Pttl().Key(key).Build()).AsInt64()
			if err != nil {
				return err
			}
			if ttl == -1 {
				return fmt.Errorf("%s: the key %s has no TTL", l, key)
			}
		}
	}
	return nil
}

// sameOrder records that the spec's token m is the server's value v, and
// fails when that breaks the order (or equality) of the pairs seen before,
// or, for a token counted up from one seen before (the spec reads its
// clock in steps of 1000 and counts up by less in between), when the
// server did not count up by as much.
func (r *replayer) sameOrder(what string, m int64, v string) error {
	g, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return fmt.Errorf("%s: %q is not a number", what, v)
	}
	for m2, g2 := range r.tokens {
		if sign(m-m2) != sign(g-g2) {
			return fmt.Errorf("%s: the spec's %d against %d is the server's %d against %d", what, m, m2, g, g2)
		}
		if m/1000 == m2/1000 && m-m2 != g-g2 {
			return fmt.Errorf("%s: the spec's %d is %d from %d, the server's %d is %d from %d", what, m, m-m2, m2, g, g-g2, g2)
		}
	}
	r.tokens[m] = g
	return nil
}

func sign(x int64) int {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

// clear deletes the trace's keys.
func (r *replayer) clear() {
	for _, l := range []string{"A", "B"} {
		k := r.keys(l)
		_ = r.rc.Do(context.Background(), r.rc.B().Del().Key(k.lock, k.queue, k.waiters).Build()).Error()
	}
}
