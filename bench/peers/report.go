package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
)

// report collects every run's metrics and prints them.
type report struct {
	libs  []*library
	scs   []*scenario
	runs  int
	quick bool
	addr  string

	values   map[string]map[string][]float64 // metric -> library id -> value per run (NaN: none)
	pings    [][]float64                     // per run, the PING of every env, µs
	errors   []string                        // scenarios that failed
	warnings []string                        // errors scenarios counted and went on after
	version  string
	load     [2]string // load average at the start and at the end
	duration time.Duration
	targets  []targetResult
}

func newReport(libs []*library, scs []*scenario, runs int, quick bool, addr string) *report {
	return &report{
		libs: libs, scs: scs, runs: runs, quick: quick, addr: addr,
		values: map[string]map[string][]float64{},
		pings:  make([][]float64, runs),
		load:   [2]string{loadAverage(), ""},
	}
}

func (r *report) add(run int, sc *scenario, lib *library, m metrics, ping time.Duration, version string, warnings []string, err error) {
	if err != nil {
		r.errors = append(r.errors, fmt.Sprintf("run %d, %s, %s: %v", run+1, sc.id, lib.label, err))
	}
	for _, w := range warnings {
		r.warnings = append(r.warnings, fmt.Sprintf("run %d, %s, %s: %s", run+1, sc.id, lib.label, w))
	}
	if ping > 0 {
		r.pings[run] = append(r.pings[run], float64(ping)/float64(time.Microsecond))
	}
	if version != "" && version != "?" {
		r.version = version
	}
	for k, v := range m {
		byLib := r.values[k]
		if byLib == nil {
			byLib = map[string][]float64{}
			r.values[k] = byLib
		}
		vs := byLib[lib.id]
		if vs == nil {
			vs = make([]float64, r.runs)
			for i := range vs {
				vs[i] = math.NaN()
			}
			byLib[lib.id] = vs
		}
		vs[run] = v
	}
}

// get is a metric of one library in one run (NaN when absent).
func (r *report) get(key, lib string, run int) float64 {
	if vs := r.values[key][lib]; vs != nil {
		return vs[run]
	}
	return math.NaN()
}

// agg combines a metric over the runs: "median" (default), "max" or "sum";
// NaN when no run has it.
func (r *report) agg(key, lib, how string) float64 {
	var vs []float64
	for _, v := range r.values[key][lib] {
		if !math.IsNaN(v) {
			vs = append(vs, v)
		}
	}
	return aggregate(vs, how)
}

func aggregate(vs []float64, how string) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	switch how {
	case "max":
		return slices.Max(vs)
	case "sum":
		var s float64
		for _, v := range vs {
			s += v
		}
		return s
	}
	return median(vs)
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ping is the median PING round trip of run (or of every run with -1), µs.
func (r *report) ping(run int) float64 {
	if run >= 0 {
		return median(r.pings[run])
	}
	var per []float64
	for i := range r.runs {
		if p := median(r.pings[i]); !math.IsNaN(p) {
			per = append(per, p)
		}
	}
	return median(per)
}

func (r *report) finish(d time.Duration) {
	r.duration = d
	r.load[1] = loadAverage()
	r.targets = r.evaluate()
}

// column is one column of a table: a metric and how to show it.
type column struct {
	key, head string
	agg       string // "median" (default), "max", "sum"
	format    func(float64) string
}

type table struct {
	title, note string
	scenario    string
	cols        []column
	rows        func(*library) bool // nil: every library
}

func (r *report) tables() []table {
	s := fullSizes()
	if r.quick {
		s = quickSizes()
	}
	sum := func(key, head string) column { return column{key: key, head: head, agg: "sum", format: fInt} }
	return []table{
		{scenario: "A", title: fmt.Sprintf("A. Uncontended: %d goroutines of one client, one key each", s.aGoroutines),
			note: "Lock+unlock cycles per second over all goroutines.",
			cols: []column{{key: "A.cycles", head: "cycles/s", format: fInt}, sum("A.errors", "errors")}},
		{scenario: "B", title: fmt.Sprintf("B. Contended: %d clients, one goroutine each, one key", s.bClients),
			note: "overlaps: acquisitions that found another holder inside; lost updates: cycles minus a counter " +
				"incremented inside with a separate load and store (both summed over runs); " +
				"share: the least busy client's cycles over the busiest one's.",
			cols: []column{{key: "B.cycles", head: "cycles/s", format: fInt}, sum("B.overlaps", "overlaps"),
				sum("B.lost", "lost updates"), {key: "B.spread", head: "share min/max", format: fDec(2)}, sum("B.errors", "errors")}},
		{scenario: "C", title: "C. Hand-off: the holder unlocks while a waiter (another client) is blocked",
			note: "From just before Unlock to the waiter's Lock returning. The holder keeps the lock 10 ms plus " +
				"a random part of twice the waiter's polling period, so pollers are seen at a random phase. " +
				"PING: median of the PINGs sent between the hand-offs, which the ×PING columns divide by. " +
				"Idle PING: median of PINGs each sent after an idle as long as a holder's, as the hand-off's release is. " +
				"Push floor: median latency of a message after such an idle, from just before SPUBLISH on one connection " +
				"to a goroutine of another client, woken by its subscription, the least a hand-off by message costs; " +
				"script push floor: the same message sent from a script that only publishes it.",
			cols: []column{{key: "C.n", head: "hand-offs", format: fInt}, {key: "C.p50", head: "p50 ms", format: fSig},
				{key: "C.p99", head: "p99 ms", format: fSig}, {key: "C.ping", head: "PING µs", format: fSig},
				{key: "C.p50/ping", head: "p50 ×PING", format: fSig},
				{key: "C.p99/ping", head: "p99 ×PING", format: fSig},
				{key: "C.idleping", head: "idle PING µs", format: fSig},
				{key: "C.p50/idleping", head: "p50 ×idle PING", format: fSig},
				{key: "C.push/idleping", head: "push floor ×idle PING", format: fSig},
				{key: "C.scriptpush/idleping", head: "script push floor ×idle PING", format: fSig}}},
		{scenario: "D", title: "D. Round trips and commands",
			note: "RT: calls into the Redis driver (a command or a pipeline each, counted by a hook on the client). " +
				"cmds: every command the server executed (INFO commandstats), those run inside scripts included. " +
				fmt.Sprintf("Per uncontended lock+unlock (%d in a row), and per hand-off while 1 or 8 other clients wait "+
					"(the holder keeps the lock %v, then asks again once another client has it).", s.dCycles, s.dHold),
			cols: []column{{key: "D.rt", head: "RT/cycle", format: fSig}, {key: "D.cmds", head: "cmds/cycle", format: fSig},
				{key: "D.cycle", head: "cycle p50 µs", format: fInt}, {key: "D.cycle/ping", head: "cycle ×PING", format: fSig},
				{key: "D.rt_h1", head: "RT/hand-off, 1 waiter", format: fSig}, {key: "D.cmds_h1", head: "cmds/hand-off, 1 waiter", format: fSig},
				{key: "D.rt_h8", head: "RT/hand-off, 8 waiters", format: fSig}, {key: "D.cmds_h8", head: "cmds/hand-off, 8 waiters", format: fSig}}},
		{scenario: "E", title: fmt.Sprintf("E. Drain: %d waiters on %d clients, arriving one by one (at least %v apart)", s.eWaiters, s.eClients, s.eGap),
			note: fmt.Sprintf("A waiter starts once the server saw the previous one's first attempt. "+
				"From the holder's unlock to the last waiter's unlock; every waiter unlocks at once. attempts: "+
				"acquire attempts the server executed per grant in that window; inversions: pairs of waiters served "+
				"against their arrival order, of %d.", s.eWaiters*(s.eWaiters-1)/2),
			cols: []column{{key: "E.total", head: "total ms", format: fSig}, {key: "E.attempts", head: "attempts/grant", format: fSig},
				{key: "E.inversions", head: "inversions", format: fInt}}},
		{scenario: "F", title: fmt.Sprintf("F. Lease-loss detection: external DEL of a held key (lease %v)", s.shortLease),
			note: "From sending the DEL until the library reports the lease lost (redisync Lost(), rueidislock's context). " +
				"The DEL comes at a random point of a renewal period. max is the worst of all runs. n/a: the library has no loss signal.",
			cols: []column{{key: "F.period", head: "renewal period ms", format: fInt}, {key: "F.p50", head: "p50 ms", format: fSig},
				{key: "F.max", head: "max ms", agg: "max", format: fSig}, sum("F.missed", "not detected"), sum("F.n", "samples")}},
		{scenario: "G", title: fmt.Sprintf("G. Scale, waiters: %d goroutines of one client waiting on %d held locks", s.gNames*s.gPerName, s.gNames),
			note: "heap and goroutines: this process's, after the waiters settled, less before; goroutines other than the waiters'. " +
				"channels: pub/sub channels (classic and sharded) with subscribers on the server. While nobody released " +
				fmt.Sprintf("(over %v): calls/s, the waiting client's calls into its driver per second; cmds/s, the commands ", s.gWindow) +
				"the server executed per second (the holder's locks have a 10 min lease, so it renews none meanwhile).",
			cols: []column{{key: "G.heap", head: "heap/waiter KiB", format: fSig}, {key: "G.goroutines", head: "extra goroutines", format: fInt},
				{key: "G.channels", head: "pub/sub channels", format: fInt}, {key: "G.calls", head: "waiting client calls/s", format: fInt},
				{key: "G.cmds", head: "server cmds/s", format: fInt}, sum("G.errors", "errors")}},
		{scenario: "G", title: fmt.Sprintf("G. Scale, held leases: %d leases renewed by one client (lease %v)", s.gLeases, s.shortLease),
			note: "Over three renewal periods after one. goroutines: this process's with the leases held, less before the client " +
				"was made. CPU: this process's and the server's, in % of one core. lost: leases the library reported lost " +
				"meanwhile (summed over runs). n/a: the library does not renew leases.",
			cols: []column{{key: "G2.period", head: "renewal period ms", format: fInt}, {key: "G2.goroutines", head: "goroutines", format: fInt},
				{key: "G2.heap", head: "heap/lease KiB", format: fSig}, {key: "G2.cmds", head: "server cmds/s", format: fInt},
				{key: "G2.cmds/lease", head: "cmds/lease/period", format: fSig}, {key: "G2.cpu", head: "client CPU %", format: fSig},
				{key: "G2.server_cpu", head: "server CPU %", format: fSig}, sum("G2.lost", "lost")}},
		{scenario: "H", title: fmt.Sprintf("H. Hot key: 1 client, %d goroutines, one key; another client's waiter on it", s.hGoroutines),
			note: fmt.Sprintf("For %v, %d goroutines of one client lock and unlock one key in a loop, checking inside as in B "+
				"(overlaps, lost updates: summed over runs, with the other client's holds). cycles/s: theirs. passed locally: "+
				"their acquisitions the library passed on between them without Redis, in %%; n/a: the library has no such passes. "+
				"cmds/cycle and server CPU µs/cycle: the server's commands (INFO commandstats) and CPU time from the start until "+
				"every goroutine stopped, over every cycle of both clients. Meanwhile a goroutine of another client "+
				"sleeps %v to %v, locks the key, holds it %v and unlocks, again and again: its wait, from calling Lock to Lock "+
				"returning (a wait still going at the end lasts until the goroutines end their last cycle), and its acquisitions.",
				s.hDur, s.hGoroutines, s.hGap, s.hGap+s.hGapJitter, s.hHold),
			cols: []column{{key: "H.cycles", head: "cycles/s", format: fInt}, sum("H.overlaps", "overlaps"),
				sum("H.lost", "lost updates"), sum("H.errors", "errors"), {key: "H.passed", head: "passed locally %", format: fSig},
				{key: "H.cmds", head: "cmds/cycle", format: fSig}, {key: "H.cpu", head: "server CPU µs/cycle", format: fSig},
				{key: "H.wait_p50", head: "other client's wait p50 ms", format: fSig},
				{key: "H.wait_p99", head: "other client's wait p99 ms", format: fSig},
				{key: "H.foreign", head: "other client's acquisitions", format: fInt}}},
	}
}

func (r *report) hasScenario(id string) bool {
	return slices.ContainsFunc(r.scs, func(s *scenario) bool { return s.id == id })
}

func (r *report) markdown(w io.Writer) {
	mode := ""
	if r.quick {
		mode = ", -quick"
	}
	server := "a redis-server started on 127.0.0.1 for every scenario and library"
	if r.addr != "" {
		server = "the redis-server at " + r.addr
	}
	fmt.Fprintf(w, "## redisync and its Go peers\n\n")
	fmt.Fprintf(w, "%s %s/%s, %d CPUs (GOMAXPROCS %d), Redis %s (%s), %d run(s)%s in %v; "+
		"load average %s at the start, %s at the end. **PING round trip p50: %s µs.**\n\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0),
		r.version, server, r.runs, mode, r.duration.Round(time.Second), r.load[0], r.load[1], fSig(r.ping(-1)))
	fmt.Fprintf(w, "Every cell is the median of the runs unless its column says otherwise; ratios to PING and the "+
		"targets are computed within a run, then the median taken. n/a: does not apply to the library.\n\n")
	r.summary(w)
	for _, t := range r.tables() {
		if !r.hasScenario(t.scenario) {
			continue
		}
		fmt.Fprintf(w, "### %s\n\n%s\n\n", t.title, t.note)
		heads := []string{"library"}
		for _, c := range t.cols {
			heads = append(heads, c.head)
		}
		writeRow(w, heads)
		writeRow(w, seps(len(heads)))
		for _, lib := range r.libs {
			row := []string{lib.label}
			for _, c := range t.cols {
				row = append(row, cell(c.format, r.agg(c.key, lib.id, c.agg)))
			}
			writeRow(w, row)
		}
		fmt.Fprintln(w)
	}
	r.targetTable(w)
	fmt.Fprintf(w, "### Configurations\n\n")
	versions := moduleVersions()
	for _, lib := range r.libs {
		fmt.Fprintf(w, "- %s\n", lib.note)
	}
	fmt.Fprintf(w, "- Modules: %s.\n\n", versions)
	if len(r.errors) > 0 {
		fmt.Fprintf(w, "### Errors (the scenario stopped; its cells of that run are missing)\n\n")
		for _, e := range r.errors {
			fmt.Fprintf(w, "- %s\n", e)
		}
		fmt.Fprintln(w)
	}
	if len(r.warnings) > 0 {
		fmt.Fprintf(w, "### Counted errors (first distinct ones)\n\n")
		for _, e := range r.warnings {
			fmt.Fprintf(w, "- %s\n", e)
		}
		fmt.Fprintln(w)
	}
}

// summary is one row per library with the headline number of each
// scenario.
func (r *report) summary(w io.Writer) {
	type col struct {
		scenario, head string
		cell           func(lib string) string
	}
	m := func(key, lib string) float64 { return r.agg(key, lib, "median") }
	cols := []col{
		{"A", "A uncontended cycles/s", func(l string) string { return cell(fInt, m("A.cycles", l)) }},
		{"B", "B contended cycles/s", func(l string) string { return cell(fInt, m("B.cycles", l)) }},
		{"B", "B overlaps + lost updates", func(l string) string {
			return cell(fInt, r.agg("B.overlaps", l, "sum")+r.agg("B.lost", l, "sum"))
		}},
		{"C", "C hand-off p50 / p99 ms", func(l string) string { return pair(fSig, m("C.p50", l), m("C.p99", l)) }},
		{"D", "D RT / cmds per cycle", func(l string) string { return pair(fSig, m("D.rt", l), m("D.cmds", l)) }},
		{"D", "D cmds/hand-off, 1 → 8 waiters", func(l string) string {
			a, b := m("D.cmds_h1", l), m("D.cmds_h8", l)
			if math.IsNaN(a) || math.IsNaN(b) {
				return "n/a"
			}
			return fSig(a) + " → " + fSig(b)
		}},
		{"E", "E attempts/grant", func(l string) string { return cell(fSig, m("E.attempts", l)) }},
		{"E", "E inversions", func(l string) string { return cell(fInt, m("E.inversions", l)) }},
		{"F", "F loss seen after, p50 / max ms", func(l string) string { return pair(fSig, m("F.p50", l), r.agg("F.max", l, "max")) }},
		{"G", "G heap/waiter KiB", func(l string) string { return cell(fSig, m("G.heap", l)) }},
		{"G", "G goroutines for held leases", func(l string) string { return cell(fInt, m("G2.goroutines", l)) }},
		{"H", "H hot key cycles/s", func(l string) string { return cell(fInt, m("H.cycles", l)) }},
		{"H", "H other client's wait p50 / p99 ms", func(l string) string { return pair(fSig, m("H.wait_p50", l), m("H.wait_p99", l)) }},
	}
	heads := []string{"library"}
	var use []col
	for _, c := range cols {
		if r.hasScenario(c.scenario) {
			use = append(use, c)
			heads = append(heads, c.head)
		}
	}
	fmt.Fprintf(w, "### Summary\n\n")
	writeRow(w, heads)
	writeRow(w, seps(len(heads)))
	for _, lib := range r.libs {
		row := []string{lib.label}
		for _, c := range use {
			row = append(row, c.cell(lib.id))
		}
		writeRow(w, row)
	}
	fmt.Fprintln(w)
}

func writeRow(w io.Writer, cells []string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
}

func seps(n int) []string {
	s := make([]string, n)
	s[0] = "---"
	for i := 1; i < n; i++ {
		s[i] = "---:"
	}
	return s
}

func cell(f func(float64) string, v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return f(v)
}

func pair(f func(float64) string, a, b float64) string {
	if math.IsNaN(a) && math.IsNaN(b) {
		return "n/a"
	}
	return cell(f, a) + " / " + cell(f, b)
}

func fInt(v float64) string { return strconv.FormatFloat(math.Round(v), 'f', 0, 64) }

func fDec(n int) func(float64) string {
	return func(v float64) string { return strconv.FormatFloat(v, 'f', n, 64) }
}

// fSig shows v with about three significant digits.
func fSig(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a >= 100:
		return fInt(v)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a >= 0.01:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}

// moduleVersions lists the versions of the compared modules this binary was
// built with.
func moduleVersions() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	want := []string{"github.com/redis/rueidis", "github.com/go-redsync/redsync/v4", "github.com/bsm/redislock", "github.com/redis/go-redis/v9"}
	var out []string
	for _, p := range want {
		for _, d := range bi.Deps {
			if d.Path == p {
				out = append(out, p+" "+d.Version)
			}
		}
	}
	if len(out) == 0 {
		return "unknown"
	}
	return strings.Join(out, ", ")
}

// loadAverage is the 1, 5 and 15 minute load averages ("?" where unknown).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// writeJSON writes every run's values, their aggregates and the targets.
func (r *report) writeJSON(path string) error {
	type libJSON struct {
		ID    string `json:"id"`
		Label string `json:"label"`
		Note  string `json:"configuration"`
	}
	type valJSON struct {
		Runs   []*float64 `json:"runs"`
		Median *float64   `json:"median"`
	}
	num := func(v float64) *float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return &v
	}
	out := struct {
		Go        string                        `json:"go"`
		Platform  string                        `json:"platform"`
		CPUs      int                           `json:"cpus"`
		Redis     string                        `json:"redis"`
		Modules   string                        `json:"modules"`
		Runs      int                           `json:"runs"`
		Quick     bool                          `json:"quick"`
		Load      [2]string                     `json:"load_average_start_end"`
		PingUS    valJSON                       `json:"ping_us"`
		Libraries []libJSON                     `json:"libraries"`
		Metrics   map[string]map[string]valJSON `json:"metrics"`
		Targets   []targetResult                `json:"targets"`
		Errors    []string                      `json:"errors"`
		Warnings  []string                      `json:"counted_errors"`
	}{
		Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(),
		Redis: r.version, Modules: moduleVersions(), Runs: r.runs, Quick: r.quick, Load: r.load,
		Metrics: map[string]map[string]valJSON{}, Targets: r.targets, Errors: r.errors, Warnings: r.warnings,
	}
	for i := range r.runs {
		out.PingUS.Runs = append(out.PingUS.Runs, num(r.ping(i)))
	}
	out.PingUS.Median = num(r.ping(-1))
	for _, l := range r.libs {
		out.Libraries = append(out.Libraries, libJSON{l.id, l.label, l.note})
	}
	for key, byLib := range r.values {
		out.Metrics[key] = map[string]valJSON{}
		for lib, vs := range byLib {
			v := valJSON{Median: num(r.agg(key, lib, "median"))}
			for _, x := range vs {
				v.Runs = append(v.Runs, num(x))
			}
			out.Metrics[key][lib] = v
		}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
