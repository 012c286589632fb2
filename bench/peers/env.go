package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// env is where one library runs one scenario: a fresh redis-server (or the
// -addr one), a key prefix of its own and an observer connection.
type env struct {
	addr   string
	prefix string
	size   sizes
	obs    rueidis.Client // observes the server; its commands are left out of counts
	ping   time.Duration  // PING round trip, median
	srv    *server        // nil with -addr

	mu       sync.Mutex
	warnings []string // distinct errors the scenario counted rather than failed on
}

func newEnv(ctx context.Context, addr, prefix string, size sizes) (*env, error) {
	e := &env{addr: addr, prefix: prefix, size: size}
	if addr == "" {
		srv, err := startServer(ctx)
		if err != nil {
			return nil, err
		}
		e.srv, e.addr = srv, srv.addr
	}
	obs, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{e.addr}, DisableCache: true})
	if err != nil {
		e.close()
		return nil, err
	}
	e.obs = obs
	if e.ping, err = e.pingRTT(ctx, size.pings); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// warn keeps the first few distinct errors a scenario counts and goes on
// after, for the report.
func (e *env) warn(err error) {
	msg := err.Error()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.warnings) < 3 && !slices.Contains(e.warnings, msg) {
		e.warnings = append(e.warnings, msg)
	}
}

func (e *env) close() {
	if e.obs != nil {
		e.obs.Close()
	}
	if e.srv != nil {
		e.srv.stop()
	}
}

// cfg is the configuration of one client of the library under test.
func (e *env) cfg(lease time.Duration) clientConfig {
	return clientConfig{addr: e.addr, prefix: e.prefix, lease: lease}
}

// pingRTT is the median of n PING round trips on the observer connection.
func (e *env) pingRTT(ctx context.Context, n int) (time.Duration, error) {
	rtts, err := e.pings(ctx, nil, n)
	if err != nil {
		return 0, err
	}
	return percentile(rtts, 50), nil
}

// pings appends n PING round trips on the observer connection to rtts.
// Scenarios that compare latencies with PING send them in between their
// measurements, so that both see the same load.
func (e *env) pings(ctx context.Context, rtts []time.Duration, n int) ([]time.Duration, error) {
	ping := e.obs.B().Ping().Build().Pin()
	for range n {
		t := time.Now()
		if err := e.obs.Do(ctx, ping).Error(); err != nil {
			return rtts, fmt.Errorf("PING: %w", err)
		}
		rtts = append(rtts, time.Since(t))
	}
	return rtts, nil
}

// idlePings returns the round trips of n PINGs, each sent after the
// connection and the server were idle for idle() (what a hand-off's release
// finds: nothing ran since the holder took the lock).
func (e *env) idlePings(ctx context.Context, n int, idle func() time.Duration) ([]time.Duration, error) {
	var rtts []time.Duration
	for range n {
		if err := sleep(ctx, idle()); err != nil {
			return rtts, err
		}
		var err error
		if rtts, err = e.pings(ctx, rtts, 1); err != nil {
			return rtts, err
		}
	}
	return rtts, nil
}

// cmdStats is INFO commandstats: calls by command name ("evalsha",
// "pubsub|shardchannels"), every command the server executed, those run
// inside scripts included.
type cmdStats map[string]int64

func (e *env) commandStats(ctx context.Context) (cmdStats, error) {
	info, err := e.obs.Do(ctx, e.obs.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	calls := cmdStats{}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		for f := range strings.SplitSeq(fields, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("INFO commandstats: %q: %w", line, err)
				}
				calls[name] = n
			}
		}
	}
	return calls, nil
}

// cmdDelta is what the server executed between two cmdStats, without the
// observer's INFO and PUBSUB.
type cmdDelta struct {
	calls map[string]int64
	total int64
}

func delta(before, after cmdStats) cmdDelta {
	d := cmdDelta{calls: map[string]int64{}}
	for name, n := range after {
		n -= before[name]
		if n == 0 || name == "info" || strings.HasPrefix(name, "pubsub|") {
			continue
		}
		d.calls[name] = n
		d.total += n
	}
	return d
}

// channels counts the pub/sub channels, classic and sharded, that start with
// the env's prefix and have subscribers.
func (e *env) channels(ctx context.Context) (int, error) {
	n := 0
	for _, kind := range []string{"CHANNELS", "SHARDCHANNELS"} {
		chs, err := e.obs.Do(ctx, e.obs.B().Arbitrary("PUBSUB", kind).Args(e.prefix+"*").Build()).AsStrSlice()
		if err != nil {
			return 0, fmt.Errorf("PUBSUB %s: %w", kind, err)
		}
		n += len(chs)
	}
	return n, nil
}

// serverCPU is the server's CPU time (user + system) so far.
func (e *env) serverCPU(ctx context.Context) (time.Duration, error) {
	info, err := e.obs.Do(ctx, e.obs.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		return 0, fmt.Errorf("INFO cpu: %w", err)
	}
	var total float64
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu: %q: %w", line, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// serverSample reads the server's command counts, then its CPU time.
func (e *env) serverSample(ctx context.Context) (cmdStats, time.Duration, error) {
	st, err := e.commandStats(ctx)
	if err != nil {
		return nil, 0, err
	}
	cpu, err := e.serverCPU(ctx)
	return st, cpu, err
}

// serverVersion is the server's redis_version.
func (e *env) serverVersion(ctx context.Context) string {
	info, err := e.obs.Do(ctx, e.obs.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "?"
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}

// percentile is the p-th percentile (nearest rank) of ds; it sorts ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(float64(len(ds))*p/100)) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
