package redisync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The protocol specification (spec/redisync.qnt) is run by Quint's
// simulator: the fixed protocol must keep every invariant, each known bug
// put back (spec/models.qnt) must be caught by its invariant, and traces of
// its Redis-side steps are replayed against the real scripts
// (specreplay_test.go).

// specInvariants are the invariants the specification states.
var specInvariants = []string{"oneOwner", "tokensRise", "heldAtDelivery", "vouchedHeld", "waitBounded", "allExpire", "holdsMatch"}

// quintRun is one run of the simulator.
type quintRun struct {
	out     string        // what it printed
	seed    string        // the seed it ran with
	elapsed time.Duration // how long it took
	trace   []itfState    // the trace it wrote (the violation's, when one was found)
	found   bool          // it found a violation
}

// runQuint runs `quint run` on the module main of spec/models.qnt with
// every invariant, a random seed, samples runs of up to steps steps, and
// extra arguments. It writes the traces to itf (a pattern with {seq} for
// several), or, when itf is "", the one it reports to a file of its own,
// which it reads. The test fails when node or the pinned quint package is
// missing, or when the simulator fails otherwise than by a violation.
func runQuint(t *testing.T, ctx context.Context, main string, samples, steps int, itf string, extra ...string) quintRun {
	t.Helper()
	quint := quintPath(t)
	own := itf == ""
	if own {
		itf = filepath.Join(t.TempDir(), "trace.itf.json")
	}
	seed := fmt.Sprintf("0x%x", rand.Uint64()>>8)
	args := []string{"run", "models.qnt", "--main=" + main, "--backend=typescript",
		"--seed=" + seed, "--max-samples=" + strconv.Itoa(samples), "--max-steps=" + strconv.Itoa(steps),
		"--verbosity=1", "--out-itf=" + itf}
	args = append(append(args, extra...), "--invariants")
	args = append(args, specInvariants...)
	cmd := exec.CommandContext(ctx, quint, args...)
	cmd.Dir = "spec"
	start := time.Now()
	b, err := cmd.CombinedOutput()
	r := quintRun{out: string(b), seed: seed, elapsed: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && strings.Contains(r.out, "Invariant violated"):
		r.found = true
	default:
		t.Fatalf("quint run %s (seed %s): %v\n%s", main, seed, err, r.out)
	}
	if own {
		r.trace = readITF(t, itf)
	}
	return r
}

// quintPath is the quint command that make deps installs in spec/.
func quintPath(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is not installed: run `make deps` (it installs node, npm and the Quint model checker)")
	}
	p, err := filepath.Abs("spec/node_modules/.bin/quint")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the Quint model checker is not installed in spec/node_modules: run `make deps` (npm ci in spec/): %v", err)
	}
	return p
}

// TestSpecInvariants runs the fixed protocol's specification with every
// invariant: about a minute, longer under REDISYNC_SOAK. A violation prints
// its seed and trace.
func TestSpecInvariants(t *testing.T) {
	samples := soak(1500, 40000)
	ctx := withTimeout(t, time.Duration(soak(5, 120))*time.Minute)
	r := runQuint(t, ctx, "fixed", samples, 30, "")
	if r.found {
		t.Fatalf("the specification broke an invariant (seed %s, replay with: cd spec && npx quint run models.qnt --main=fixed --backend=typescript --seed=%s --max-steps=30 --invariants %s):\n%s\n%s",
			r.seed, r.seed, strings.Join(specInvariants, " "), r.out, formatTrace(r.trace))
	}
	t.Logf("%d runs of up to 30 steps, no violation, in %v (seed %s)", samples, r.elapsed.Round(time.Millisecond), r.seed)
}

// TestSpecFindsKnownBugs puts back, one at a time, bugs the protocol had
// (spec/models.qnt) and expects the simulator to find each, by the
// invariant that says what it breaks, within a minute of simulation.
func TestSpecFindsKnownBugs(t *testing.T) {
	for _, c := range []struct {
		main       string
		invariants []string // those that may catch it: one at least must
	}{
		// A Group re-entering a lock held with a block of tokens reserved
		// for local passes raises the counter; the next pass hands out a
		// token below the Group's.
		{"groupOutrunsBlock", []string{"tokensRise"}},
		// A re-entry finding its lock free takes it again under the
		// parent's owner id: the ownership it extends is gone, delivered
		// or vouched for.
		{"reentryRetakesFree", []string{"heldAtDelivery", "vouchedHeld"}},
		// A hand-over message delivered however old: the lock expired and
		// went to someone else meanwhile.
		{"handOverUnchecked", []string{"heldAtDelivery", "tokensRise"}},
		// A Group acquired with the Context of a Lease whose lock went
		// free takes it again under the Lease's owner id: the Lease's
		// renewals succeed, and its loss is never reported; a re-entry
		// through that Lease may then be delivered, its ownership gone
		// (seed 0x870e9714a8feae).
		{"groupRetakesFree", []string{"vouchedHeld", "heldAtDelivery"}},
	} {
		t.Run(c.main, func(t *testing.T) {
			ctx := withTimeout(t, 3*time.Minute)
			r := runQuint(t, ctx, c.main, 20000, 30, "")
			if !r.found {
				t.Fatalf("no violation in 20000 runs of %s (seed %s):\n%s", c.main, r.seed, r.out)
			}
			broken := brokenInvariants(r.out)
			for _, b := range broken {
				if !slices.Contains(c.invariants, b) {
					t.Fatalf("%s broke %s, not only %v (seed %s):\n%s\n%s", c.main, b, c.invariants, r.seed, r.out, formatTrace(r.trace))
				}
			}
			if len(broken) == 0 {
				t.Fatalf("%s: no invariant reported broken (seed %s):\n%s", c.main, r.seed, r.out)
			}
			t.Logf("%s: %v broken by a trace of %d steps, found in %v (seed %s)",
				c.main, broken, len(r.trace)-1, r.elapsed.Round(time.Millisecond), r.seed)
			// A generous bound: the target is a minute of simulation on a
			// machine that runs other tests at the same time.
			if r.elapsed > 2*time.Minute {
				t.Errorf("%s took %v to find", c.main, r.elapsed)
			}
		})
	}
}

// brokenInvariants are the invariants quint reports broken ("❌ name").
func brokenInvariants(out string) []string {
	var b []string
	for _, l := range strings.Split(out, "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(l), "❌ "); ok {
			b = append(b, name)
		}
	}
	return b
}

// An ITF trace (the Informal Trace Format that quint writes): its states,
// each a map of the specification's variables (without their module
// prefix) to their values, decoded as JSON with the ITF encodings
// ({"#bigint": "n"}, {"#set": [...]}, {"#map": [[k, v], ...]},
// {"#tup": [...]}).
type itfState map[string]any

func readITF(t *testing.T, path string) []itfState {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the trace: %v", err)
	}
	var doc struct {
		States []map[string]any `json:"states"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("decoding the trace %s: %v", path, err)
	}
	out := make([]itfState, len(doc.States))
	for i, s := range doc.States {
		st := itfState{}
		for k, v := range s {
			if k == "#meta" {
				continue
			}
			st[k[strings.LastIndex(k, "::")+2:]] = v
		}
		out[i] = st
	}
	return out
}

func itfInt(v any) int64 {
	m, _ := v.(map[string]any)
	n, _ := strconv.ParseInt(fmt.Sprint(m["#bigint"]), 10, 64)
	return n
}

func itfRec(v any) map[string]any { m, _ := v.(map[string]any); return m }

func itfSet(v any) []any { s, _ := itfRec(v)["#set"].([]any); return s }

func itfList(v any) []any { l, _ := v.([]any); return l }

// itfMap returns the pairs of an ITF map.
func itfMap(v any) [][2]any {
	var out [][2]any
	for _, p := range itfList(itfRec(v)["#map"]) {
		kv := itfList(p)
		out = append(out, [2]any{kv[0], kv[1]})
	}
	return out
}

func itfInts(v any) []int64 {
	var out []int64
	for _, x := range itfSet(v) {
		out = append(out, itfInt(x))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// specLock is the specification's Lock: Redis's state of one lock name.
type specLock struct {
	exists       bool
	owner        int64
	holds        []int64
	token, t     int64
	queue        []int64
	entries      map[int64]specEntry
	deadlines    map[int64]int64 // per Client
	redisSummary string
}

type specEntry struct{ client, hold, reserve int64 }

// specLocks decodes the state's redis variable: lock name -> specLock.
func specLocks(s itfState) map[string]specLock {
	out := map[string]specLock{}
	for _, kv := range itfMap(s["redis"]) {
		r := itfRec(kv[1])
		l := specLock{
			exists: r["exists"] == true, owner: itfInt(r["owner"]), holds: itfInts(r["holds"]),
			token: itfInt(r["token"]), t: itfInt(r["t"]),
			entries: map[int64]specEntry{}, deadlines: map[int64]int64{},
		}
		for _, w := range itfList(r["queue"]) {
			l.queue = append(l.queue, itfInt(w))
		}
		for _, e := range itfMap(r["entries"]) {
			er := itfRec(e[1])
			l.entries[itfInt(e[0])] = specEntry{itfInt(er["client"]), itfInt(er["hold"]), itfInt(er["reserve"])}
		}
		for _, d := range itfMap(r["dl"]) {
			l.deadlines[itfInt(d[0])] = itfInt(d[1])
		}
		out[kv[0].(string)] = l
	}
	return out
}

func (l specLock) String() string {
	if !l.exists && len(l.queue) == 0 {
		return "-"
	}
	s := "no hash"
	if l.exists {
		s = fmt.Sprintf("owner %d holds %v token %d", l.owner, l.holds, l.token)
		if l.t != 0 {
			s += fmt.Sprintf(" t %d", l.t)
		}
	}
	if len(l.queue) > 0 {
		s += fmt.Sprintf(" queue %v", l.queue)
	}
	return s
}

// specStep is the step a state was reached by (the variable taken).
type specStep struct {
	kind           string
	client         int64
	lock           string
	owner, hold, n int64
	members        map[string]int64 // a group's owner per lock
	holds          map[string]int64 // a group's hold per lock
	expired        []string
}

func stepOf(s itfState) specStep {
	r := itfRec(s["taken"])
	st := specStep{
		kind: fmt.Sprint(r["kind"]), client: itfInt(r["client"]), lock: fmt.Sprint(r["lock"]),
		owner: itfInt(r["owner"]), hold: itfInt(r["hold"]), n: itfInt(r["n"]),
		members: map[string]int64{}, holds: map[string]int64{},
	}
	for _, kv := range itfMap(r["members"]) {
		st.members[kv[0].(string)] = itfInt(kv[1])
	}
	for _, kv := range itfMap(r["mholds"]) {
		st.holds[kv[0].(string)] = itfInt(kv[1])
	}
	for _, k := range itfSet(r["expired"]) {
		st.expired = append(st.expired, k.(string))
	}
	sort.Strings(st.expired)
	return st
}

func (s specStep) String() string {
	switch s.kind {
	case "groupAcquire", "groupRelease", "renewGroup":
		return fmt.Sprintf("%s c%d members %v holds %v", s.kind, s.client, s.members, s.holds)
	case "tick":
		return fmt.Sprintf("tick expired %v", s.expired)
	case "client", "init", "failover":
		return s.kind
	}
	return fmt.Sprintf("%s c%d %s owner %d hold %d n %d", s.kind, s.client, s.lock, s.owner, s.hold, s.n)
}

// formatTrace prints a trace one line a step: the step, Redis's state per
// lock, the delivered leases and the invariants' ghosts.
func formatTrace(tr []itfState) string {
	var b strings.Builder
	for i, s := range tr {
		locks := specLocks(s)
		names := make([]string, 0, len(locks))
		for k := range locks {
			names = append(names, k)
		}
		sort.Strings(names)
		fmt.Fprintf(&b, "%3d now %d  %-50s |", i, itfInt(s["now"]), stepOf(s))
		for _, k := range names {
			fmt.Fprintf(&b, " %s: %s |", k, locks[k])
		}
		var ls []string
		for _, l := range itfSet(s["leases"]) {
			r := itfRec(l)
			ls = append(ls, fmt.Sprintf("%s c%d %s owner %d token %d", r["kind"], itfInt(r["client"]), r["lock"], itfInt(r["owner"]), itfInt(r["token"])))
		}
		sort.Strings(ls)
		fmt.Fprintf(&b, " leases [%s]", strings.Join(ls, "; "))
		if s["tokenBad"] == true {
			b.WriteString(" TOKEN FELL")
		}
		if s["unheldDelivered"] == true {
			b.WriteString(" DELIVERED UNHELD")
		}
		b.WriteString("\n")
	}
	return b.String()
}
