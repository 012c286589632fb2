// Command peers compares redisync with the Go lock libraries on Redis
// (go-redsync/redsync, bsm/redislock, rueidis' rueidislock and a minimal
// SET NX floor) in one run, against redis-server processes it starts on
// loopback, and prints Markdown tables; -json and -svg write the numbers and
// a chart. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "peers:", err)
		}
		os.Exit(1)
	}
}

// run is the whole program: it parses args, runs every scenario for every
// library runs times, and writes the tables to stdout and progress to
// stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	runs := fs.Int("runs", 3, "runs of every scenario; tables report the median")
	scList := fs.String("scenarios", "A,B,C,D,E,F,G,H", "scenarios to run, comma-separated")
	libList := fs.String("libs", "", "libraries to run, comma-separated (default all): "+strings.Join(libIDs(libraries()), ","))
	quick := fs.Bool("quick", false, "small counts and short times (for CI)")
	jsonPath := fs.String("json", "", "write the results as JSON to this file")
	svgPath := fs.String("svg", "", "write a bar chart (uncontended cycles/s, hand-off p50) as SVG to this file")
	budget := fs.String("local-passes", "", "the redisync Mutex row's budget of local passes, as N/D (WithLocalPasses(N, D), e.g. 64/2ms); default the library's")
	addr := fs.String("addr", "", "use this redis-server (loopback only) instead of starting one per scenario and library")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *runs < 1 || *runs > 100 {
		return errors.New("-runs must be between 1 and 100")
	}
	if *addr != "" {
		if err := checkLoopback(*addr); err != nil {
			return err
		}
	}
	scs, err := pick(scenarios(), *scList, func(s *scenario) string { return s.id })
	if err != nil {
		return fmt.Errorf("-scenarios: %w", err)
	}
	libs := libraries()
	if *budget != "" {
		if err := withBudget(libs, *budget); err != nil {
			return fmt.Errorf("-local-passes: %w", err)
		}
	}
	if *libList != "" {
		if libs, err = pick(libs, *libList, func(l *library) string { return l.id }); err != nil {
			return fmt.Errorf("-libs: %w", err)
		}
	}
	size := fullSizes()
	if *quick {
		size = quickSizes()
	}

	rep := newReport(libs, scs, *runs, *quick, *addr)
	started := time.Now()
	for r := range *runs {
		if err := runOnce(ctx, rep, r, size, stderr); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	rep.finish(time.Since(started))
	rep.markdown(stdout)
	if *jsonPath != "" {
		if err := rep.writeJSON(*jsonPath); err != nil {
			return err
		}
	}
	if *svgPath != "" {
		if err := rep.writeSVG(*svgPath); err != nil {
			return err
		}
	}
	return nil
}

// runOnce runs every scenario of rep for every library, as run r of them,
// and reports progress on stderr.
func runOnce(ctx context.Context, rep *report, r int, size sizes, stderr io.Writer) error {
	libs := rep.libs
	for _, sc := range rep.scs {
		// Rotate the order of the libraries from run to run.
		for i := range libs {
			lib := libs[(i+r)%len(libs)]
			if sc.applies != nil && !sc.applies(lib) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			t := time.Now()
			m, ping, version, warnings, err := runCell(ctx, rep.addr, size, sc, lib, r)
			rep.add(r, sc, lib, m, ping, version, warnings, err)
			status := "ok"
			if err != nil {
				status = "error: " + err.Error()
			}
			fmt.Fprintf(stderr, "run %d/%d  %s  %-32s %6.1fs  %s\n", r+1, rep.runs, sc.id, lib.label, time.Since(t).Seconds(), status)
		}
	}
	return nil
}

// runCell runs one scenario for one library in an env of its own.
func runCell(ctx context.Context, addr string, size sizes, sc *scenario, lib *library, run int) (m metrics, ping time.Duration, version string, warnings []string, err error) {
	ctx, cancel := context.WithTimeout(ctx, size.cellLimit)
	defer cancel()
	prefix := fmt.Sprintf("peers:%d:%s:%s:%d", run, sc.id, lib.id, time.Now().UnixNano())
	e, err := newEnv(ctx, addr, prefix, size)
	if err != nil {
		return nil, 0, "", nil, err
	}
	defer e.close()
	m, err = sc.run(ctx, e, lib)
	e.mu.Lock()
	warnings = slices.Clone(e.warnings)
	e.mu.Unlock()
	return m, e.ping, e.serverVersion(ctx), warnings, err
}

// pick selects the items whose ids list names, in their own order.
func pick[T any](all []T, list string, id func(T) string) ([]T, error) {
	var out []T
	want := map[string]bool{}
	for _, w := range strings.Split(list, ",") {
		if w = strings.TrimSpace(w); w != "" {
			want[w] = true
		}
	}
	for _, x := range all {
		if want[id(x)] {
			out = append(out, x)
			delete(want, id(x))
		}
	}
	if len(want) > 0 {
		var unknown []string
		for w := range want {
			unknown = append(unknown, w)
		}
		slices.Sort(unknown)
		return nil, fmt.Errorf("unknown %q", unknown)
	}
	if len(out) == 0 {
		return nil, errors.New("nothing selected")
	}
	return out, nil
}

func libIDs(libs []*library) []string {
	ids := make([]string, len(libs))
	for i, l := range libs {
		ids[i] = l.id
	}
	return ids
}
