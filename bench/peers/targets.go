package main

import (
	"fmt"
	"io"
	"math"
)

// The rows the targets are about.
const (
	mutexRow  = "redisync"
	globalRow = "redisync-global" // the Mutex without local passes
	fairRow   = "redisync-fair"
)

// peerRows are the libraries "the best peer" is chosen from.
var peerRows = []string{"redsync", "redislock", "rueidislock"}

// targetResult is how redisync did against one of its published targets.
type targetResult struct {
	Scenario string     `json:"scenario"`
	Target   string     `json:"target"`
	Goal     string     `json:"goal"`
	Runs     []*float64 `json:"runs"`
	Value    *float64   `json:"value"` // over the runs, as Aggregate says
	Agg      string     `json:"aggregate"`
	RunsMet  int        `json:"runs_met"`
	Measured int        `json:"runs_measured"`
	Met      bool       `json:"met"`
	// Info marks a figure shown next to the targets for comparison, with
	// no goal: neither met nor missed.
	Info  bool `json:"informational,omitempty"`
	shown string
}

type target struct {
	scenario, text, goal string
	agg                  string // how the runs combine: "median" (default), "max", "sum"
	value                func(run int) float64
	ok                   func(v float64) bool // nil: a figure for comparison, with no goal
	format               func(float64) string
}

func ratio(v float64) string { return fSig(v) + "×" }

func atMost(x float64) func(float64) bool  { return func(v float64) bool { return v <= x } }
func atLeast(x float64) func(float64) bool { return func(v float64) bool { return v >= x } }

// lossWorst is the slower of the Mutex's and the FairMutex's F figure key
// in a run; ∞ when either missed a loss.
func (r *report) lossWorst(key string, run int) float64 {
	rows := []string{mutexRow, fairRow}
	for _, l := range rows {
		if r.get("F.missed", l, run) > 0 {
			return math.Inf(1)
		}
	}
	return r.maxOver(key, run, rows)
}

// best is the best peer's figure key in a run.
func (r *report) best(key string, run int) float64 { return r.maxOver(key, run, peerRows) }

// maxOver is the largest figure key of rows in a run, NaN when none has it.
func (r *report) maxOver(key string, run int, rows []string) float64 {
	var vs []float64
	for _, l := range rows {
		if v := r.get(key, l, run); !math.IsNaN(v) {
			vs = append(vs, v)
		}
	}
	return aggregate(vs, "max")
}

// published are redisync's targets: speed (A to D), then order, loss and
// scale (E to G), then the hot key (H).
func (r *report) published() []target {
	return append(append(r.speedTargets(), r.behaviourTargets()...), r.hotTargets()...)
}

func (r *report) speedTargets() []target {
	g, best := r.get, r.best
	return []target{
		{scenario: "A", text: "redisync Mutex cycles/s ÷ floor", goal: "≥ 0.6×", ok: atLeast(0.6), format: ratio,
			value: func(run int) float64 { return g("A.cycles", mutexRow, run) / g("A.cycles", "floor", run) }},
		{scenario: "A", text: "floor with fencing tokens cycles/s ÷ floor", goal: "for comparison", format: ratio,
			value: func(run int) float64 { return g("A.cycles", "floor-fenced", run) / g("A.cycles", "floor", run) }},
		{scenario: "A", text: "redisync Mutex cycles/s ÷ fastest peer", goal: "≥ 1.3×", ok: atLeast(1.3), format: ratio,
			value: func(run int) float64 { return g("A.cycles", mutexRow, run) / best("A.cycles", run) }},
		{scenario: "A", text: "redisync FairMutex cycles/s ÷ Mutex", goal: "≥ 0.9×", ok: atLeast(0.9), format: ratio,
			value: func(run int) float64 { return g("A.cycles", fairRow, run) / g("A.cycles", mutexRow, run) }},
		{scenario: "B", text: "redisync Mutex cycles/s ÷ floor", goal: "≥ 1×", ok: atLeast(1), format: ratio,
			value: func(run int) float64 { return g("B.cycles", mutexRow, run) / g("B.cycles", "floor", run) }},
		{scenario: "B", text: "redisync Mutex least busy client's share ÷ busiest's", goal: "≥ 0.5", ok: atLeast(0.5), format: fSig,
			value: func(run int) float64 { return g("B.spread", mutexRow, run) }},
		{scenario: "B", text: "overlaps + lost updates, redisync Mutex and FairMutex, all runs", goal: "0", agg: "sum",
			ok: atMost(0), format: fInt, value: func(run int) float64 {
				v := 0.0
				for _, l := range []string{mutexRow, fairRow} {
					for _, k := range []string{"B.overlaps", "B.lost"} {
						if x := g(k, l, run); !math.IsNaN(x) {
							v += x
						}
					}
				}
				return v
			}},
		{scenario: "C", text: "redisync Mutex hand-off p50 ÷ PING", goal: "≤ 1.5×", ok: atMost(1.5), format: ratio,
			value: func(run int) float64 { return g("C.p50/ping", mutexRow, run) }},
		{scenario: "C", text: "redisync Mutex hand-off p99 ÷ PING", goal: "≤ 4×", ok: atMost(4), format: ratio,
			value: func(run int) float64 { return g("C.p99/ping", mutexRow, run) }},
		{scenario: "C", text: "redisync FairMutex hand-off p50 ÷ Mutex's", goal: "≤ 1.1×", ok: atMost(1.1), format: ratio,
			value: func(run int) float64 { return g("C.p50", fairRow, run) / g("C.p50", mutexRow, run) }},
		{scenario: "D", text: "redisync Mutex round trips per uncontended cycle", goal: "2",
			ok: func(v float64) bool { return math.Abs(v-2) < 0.01 }, format: fSig,
			value: func(run int) float64 { return g("D.rt", mutexRow, run) }},
		{scenario: "D", text: "redisync Mutex server commands per uncontended cycle", goal: "≤ 8", ok: atMost(8), format: fSig,
			value: func(run int) float64 { return g("D.cmds", mutexRow, run) }},
		{scenario: "D", text: "redisync Mutex commands per hand-off (1 waiter) ÷ floor's", goal: "≤ 2×", ok: atMost(2), format: ratio,
			value: func(run int) float64 { return g("D.cmds_h1", mutexRow, run) / g("D.cmds_h1", "floor", run) }},
		{scenario: "D", text: "redisync Mutex commands per hand-off, 8 waiters ÷ 1 waiter", goal: "≤ 1.25× (independent of the waiters)",
			ok: atMost(1.25), format: ratio,
			value: func(run int) float64 { return g("D.cmds_h8", mutexRow, run) / g("D.cmds_h1", mutexRow, run) }},
	}
}

func (r *report) behaviourTargets() []target {
	g, lossWorst := r.get, r.lossWorst
	return []target{
		{scenario: "E", text: "redisync Mutex acquire attempts per grant", goal: "≤ 2", ok: atMost(2), format: fSig,
			value: func(run int) float64 { return g("E.attempts", mutexRow, run) }},
		{scenario: "E", text: "redisync FairMutex order inversions, worst run", goal: "0", agg: "max", ok: atMost(0), format: fInt,
			value: func(run int) float64 { return g("E.inversions", fairRow, run) }},
		{scenario: "F", text: "redisync Mutex and FairMutex: loss detection after a DEL, p50 ms, slower of the two (undetected: ∞)",
			goal: "≤ 5 ms", ok: atMost(5), format: fSig, value: func(run int) float64 { return lossWorst("F.p50", run) }},
		{scenario: "F", text: "redisync Mutex and FairMutex: slowest loss detection after a DEL, ms, worst run (undetected: ∞)",
			goal: "≤ 50 ms", agg: "max", ok: atMost(50), format: fSig, value: func(run int) float64 { return lossWorst("F.max", run) }},
		{scenario: "G", text: "redisync Mutex pub/sub channels ÷ lock names with waiters (one waiting Client)", goal: "1×",
			ok: func(v float64) bool { return v == 1 }, format: ratio,
			value: func(run int) float64 { return g("G.channels", mutexRow, run) / g("G.names", mutexRow, run) }},
		{scenario: "G", text: "redisync Mutex goroutines with all leases held (client's, not per lease)", goal: "≤ 10",
			ok: atMost(10), format: fInt, value: func(run int) float64 { return g("G2.goroutines", mutexRow, run) }},
	}
}

// hotTargets are H's: the Mutex's local passes against the floor, and
// figures for comparison with the Mutex without them.
func (r *report) hotTargets() []target {
	g := r.get
	return []target{
		{scenario: "H", text: "1 client, 8 goroutines: redisync Mutex cycles/s ÷ floor", goal: "≥ 5×", ok: atLeast(5), format: ratio,
			value: func(run int) float64 { return g("H.cycles", mutexRow, run) / g("H.cycles", "floor", run) }},
		{scenario: "H", text: "1 client, 8 goroutines: redisync Mutex without local passes, cycles/s ÷ floor", goal: "for comparison",
			format: ratio, value: func(run int) float64 { return g("H.cycles", globalRow, run) / g("H.cycles", "floor", run) }},
		{scenario: "H", text: "1 client, 8 goroutines: redisync Mutex cycles/s ÷ without local passes", goal: "for comparison",
			format: ratio, value: func(run int) float64 { return g("H.cycles", mutexRow, run) / g("H.cycles", globalRow, run) }},
		{scenario: "H", text: "other client's wait p99, ms: redisync Mutex − without local passes (local passes last 2 ms at most by default)",
			goal: "for comparison", format: fSig,
			value: func(run int) float64 { return g("H.wait_p99", mutexRow, run) - g("H.wait_p99", globalRow, run) }},
		{scenario: "H", text: "overlaps + lost updates, redisync Mutex with and without local passes and FairMutex, all runs", goal: "0",
			agg: "sum", ok: atMost(0), format: fInt, value: func(run int) float64 {
				v, seen := 0.0, false
				for _, l := range []string{mutexRow, globalRow, fairRow} {
					for _, k := range []string{"H.overlaps", "H.lost"} {
						if x := g(k, l, run); !math.IsNaN(x) {
							v, seen = v+x, true
						}
					}
				}
				if !seen {
					return math.NaN()
				}
				return v
			}},
	}
}

// evaluate computes every target over the runs.
func (r *report) evaluate() []targetResult {
	var out []targetResult
	for _, t := range r.published() {
		if !r.hasScenario(t.scenario) {
			continue
		}
		res := targetResult{Scenario: t.scenario, Target: t.text, Goal: t.goal, Agg: t.agg, Info: t.ok == nil}
		if res.Agg == "" {
			res.Agg = "median"
		}
		var vs []float64
		for run := range r.runs {
			v := t.value(run)
			if math.IsNaN(v) {
				res.Runs = append(res.Runs, nil)
				continue
			}
			vs = append(vs, v)
			vv := v
			if math.IsInf(v, 0) {
				res.Runs = append(res.Runs, nil)
			} else {
				res.Runs = append(res.Runs, &vv)
			}
			res.Measured++
			if !res.Info && t.ok(v) {
				res.RunsMet++
			}
		}
		v := aggregate(vs, res.Agg)
		switch {
		case math.IsNaN(v):
			res.shown = "n/a"
		case math.IsInf(v, 1):
			res.shown = "∞"
		default:
			res.Value = &v
			res.shown = t.format(v)
			res.Met = !res.Info && t.ok(v)
		}
		out = append(out, res)
	}
	return out
}

func (r *report) targetTable(w io.Writer) {
	if len(r.targets) == 0 {
		return
	}
	fmt.Fprintf(w, "### Targets\n\n")
	writeRow(w, []string{"scenario", "target", "goal", "measured", "runs meeting it", "verdict"})
	writeRow(w, []string{"---", "---", "---", "---:", "---:", "---"})
	for _, t := range r.targets {
		verdict := "met"
		if !t.Met {
			verdict = "**missed**"
		}
		met := fmt.Sprintf("%d/%d", t.RunsMet, t.Measured)
		if t.Info {
			verdict, met = "—", fmt.Sprintf("%d runs", t.Measured)
		}
		if t.Value == nil && t.shown == "n/a" {
			verdict = "not measured"
		}
		writeRow(w, []string{t.Scenario, t.Target, t.Goal, t.shown, met, verdict})
	}
	fmt.Fprintln(w)
}
