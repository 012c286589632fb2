package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/internal/redistest"
)

var demoCommand = &command{
	name:     "demo",
	synopsis: "[--addr host:port] [--workers N] [--rounds N]",
	summary:  "watch workers contend for a lock, then a lease get lost and fenced off",
	help: `
Runs a self-contained demonstration of redisync.

Phase 1: N workers, each with its own Client and Redis connection (standing
for separate processes), contend for the Mutex "demo:orders". Each round a
worker takes the lock, reads a counter kept in Redis, works for 50-150ms and
writes the counter back incremented: a read-modify-write that only the lock
protects. At the end the counter must equal workers*rounds and the fencing
tokens must have increased with every acquisition.

Phase 2: a worker whose Client has a 1s watchdog lease holds the lock and an
operator force-unlocks it. The worker's lease reports the loss (within
milliseconds: every Client is dialed, as with redisync.Dial, and learns of
changes to its locks), another worker takes the lock, and its fencing
token is greater than the lost one.

Redis is --addr, else $REDIS_URL (redis://[user:password@]host:port/db),
else a redis-server started on a free loopback port for the demo and
stopped at its end. The demo writes the keys redisync:{demo:orders}* and
demo:orders:counter.`,
	flags: func(fs *flag.FlagSet) runFunc {
		var cfg demoConfig
		fs.StringVar(&cfg.addr, "addr", "", "Redis `host:port` (default: $REDIS_URL, else a redis-server started for the demo)")
		fs.IntVar(&cfg.workers, "workers", 4, "`N` workers contending for the lock, each with its own Client")
		fs.IntVar(&cfg.rounds, "rounds", 3, "`N` acquisitions per worker")
		return func(ctx context.Context, args []string, stdout io.Writer) error {
			if err := noArgs(args); err != nil {
				return err
			}
			switch {
			case cfg.workers < 1:
				return usageErrorf("--workers must be at least 1, got %d", cfg.workers)
			case cfg.rounds < 1:
				return usageErrorf("--rounds must be at least 1, got %d", cfg.rounds)
			}
			return runDemo(ctx, cfg, stdout)
		}
	},
}

const (
	demoLock    = "demo:orders"
	demoCounter = "demo:orders:counter"
	// demoLease is the watchdog lease of the worker that loses its lock.
	demoLease = time.Second
	// demoLossTimeout bounds the wait for the lost lease to be noticed:
	// within a round trip for a dialed Client, at the next renewal (every
	// third of demoLease) for one that cannot learn of changes (RESP2).
	demoLossTimeout = 5 * time.Second
	// demoCleanup bounds the Unlocks and the cleanup the demo sends after
	// its context ended.
	demoCleanup = 5 * time.Second
)

type demoConfig struct {
	addr    string
	workers int
	rounds  int
}

// demo is one run of the demonstration.
type demo struct {
	cfg   demoConfig
	opt   rueidis.ClientOption
	start time.Time

	outMu sync.Mutex
	out   io.Writer

	connMu sync.Mutex
	conns  []*demoConn // closed when the demo ends

	logMu sync.Mutex
	acqs  []acquisition // in acquisition order
	lost  int
}

// acquisition is one successful Lock.
type acquisition struct {
	who   string
	token uint64
}

// demoConn is what one worker (one process in real life) has: its own
// redisync Client, dialed as programs dial it (so that it learns of a lost
// lock within a round trip), and a connection of its own for the counter.
type demoConn struct {
	name string
	rc   rueidis.Client
	c    *redisync.Client
}

func runDemo(ctx context.Context, cfg demoConfig, stdout io.Writer) (err error) {
	d := &demo{cfg: cfg, out: stdout, start: time.Now()}

	opt, where, origin, server, err := demoRedis(cfg.addr)
	if err != nil {
		return err
	}
	if server != nil {
		defer func() {
			if serr := server.Stop(); serr != nil && err == nil {
				err = fmt.Errorf("stop redis-server: %w", serr)
			}
		}()
	}
	d.opt = opt
	defer d.closeAll()

	admin, err := d.connect("operator")
	if err != nil {
		return fmt.Errorf("connect to Redis at %s: %w", where, err)
	}
	fmt.Fprintf(stdout, "Redis%s at %s (%s)\n", redisVersion(ctx, admin.rc), where, origin)
	fmt.Fprintf(stdout, "%s × %s on mutex %q, each worker with its own Client and connection\n",
		plural(cfg.workers, "worker"), plural(cfg.rounds, "round"), demoLock)

	if err := d.prepare(ctx, admin); err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), demoCleanup)
		defer cancel()
		_ = admin.rc.Do(cctx, admin.rc.B().Del().Key(demoCounter).Build()).Error()
	}()

	workers, err := d.phase1(ctx)
	if err != nil {
		return err
	}
	if err := d.phase2(ctx, admin, workers[0]); err != nil {
		return err
	}
	d.summary()
	return nil
}

// demoRedis returns where Redis is and where that came from: addr, else
// $REDIS_URL, else a redis-server started for the demo (the caller must
// Stop it).
func demoRedis(addr string) (opt rueidis.ClientOption, where, origin string, server *redistest.Server, err error) {
	if addr != "" {
		return rueidis.ClientOption{InitAddress: []string{addr}}, addr, "--addr", nil, nil
	}
	if url := os.Getenv("REDIS_URL"); url != "" {
		opt, err := rueidis.ParseURL(url)
		if err != nil {
			return opt, "", "", nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		return opt, strings.Join(opt.InitAddress, ","), "REDIS_URL", nil, nil
	}
	server, err = redistest.StartServer()
	if err != nil {
		return opt, "", "", nil, err
	}
	return rueidis.ClientOption{InitAddress: []string{server.Addr}}, server.Addr,
		"a redis-server started for this demo, stopped when it ends", server, nil
}

// redisVersion returns " X" for Redis version X, from INFO server, or "".
func redisVersion(ctx context.Context, rc rueidis.Client) string {
	info, err := rc.Do(ctx, rc.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return " " + v
		}
	}
	return ""
}

// connect dials a Client and opens a connection for the counter, for one
// participant.
func (d *demo) connect(name string, opts ...redisync.Option) (*demoConn, error) {
	plain := d.opt
	plain.DisableCache = true
	rc, err := rueidis.NewClient(plain)
	if err != nil {
		return nil, err
	}
	// Loss of a lease is part of the show: keep the library's warnings
	// about it out of the output.
	opts = append([]redisync.Option{redisync.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
	c, err := redisync.Dial(d.opt, opts...)
	if err != nil {
		rc.Close()
		return nil, err
	}
	conn := &demoConn{name: name, rc: rc, c: c}
	d.connMu.Lock()
	d.conns = append(d.conns, conn)
	d.connMu.Unlock()
	return conn, nil
}

// closeAll closes every Client, then its connection.
func (d *demo) closeAll() {
	d.connMu.Lock()
	defer d.connMu.Unlock()
	for i := len(d.conns) - 1; i >= 0; i-- {
		d.conns[i].c.Close()
		d.conns[i].rc.Close()
	}
	d.conns = nil
}

// prepare resets the counter and says so if someone else holds the lock.
func (d *demo) prepare(ctx context.Context, admin *demoConn) error {
	if err := admin.rc.Do(ctx, admin.rc.B().Set().Key(demoCounter).Value("0").Build()).Error(); err != nil {
		return fmt.Errorf("reset %s: %w", demoCounter, err)
	}
	st, err := admin.c.Mutex(demoLock).Inspect(ctx)
	if err != nil {
		return err
	}
	if st.Locked {
		fmt.Fprintf(d.out, "note: %q is held by another client (owner %s, %v left); the workers wait for it\n",
			demoLock, st.Owner, st.TTL.Round(time.Millisecond))
	}
	return nil
}

// say prints one event line: time since the start, who, what, detail.
func (d *demo) say(who, what, detail string) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	line := fmt.Sprintf("%8s  %-9s %-9s %s", ms(time.Since(d.start)), who, what, detail)
	fmt.Fprintln(d.out, strings.TrimRight(line, " "))
}

// println prints a line that is not an event.
func (d *demo) println(format string, args ...any) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	fmt.Fprintf(d.out, format+"\n", args...)
}

// ms formats d in milliseconds with one decimal: "12.3ms".
func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// record logs an acquisition. Called while holding the lock, so the log is
// in acquisition order.
func (d *demo) record(who string, token uint64) {
	d.logMu.Lock()
	defer d.logMu.Unlock()
	d.acqs = append(d.acqs, acquisition{who: who, token: token})
}

// phase1 runs the workers and checks the counter and the tokens. It
// returns the workers' connections for phase 2.
func (d *demo) phase1(ctx context.Context) ([]*demoConn, error) {
	d.println("\nPhase 1: %s, %s each; the counter in Redis is only protected by the lock",
		plural(d.cfg.workers, "worker"), plural(d.cfg.rounds, "round"))
	workers := make([]*demoConn, d.cfg.workers)
	for i := range workers {
		w, err := d.connect(fmt.Sprintf("worker-%d", i+1))
		if err != nil {
			return nil, fmt.Errorf("connect worker-%d: %w", i+1, err)
		}
		workers[i] = w
	}

	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			if err := d.work(wctx, w); err != nil {
				cancel(err) // the first error stops every worker
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err := context.Cause(wctx); err != nil {
		return nil, err
	}

	got, err := d.counter(ctx, workers[0].rc)
	if err != nil {
		return nil, err
	}
	want := int64(d.cfg.workers * d.cfg.rounds)
	d.println("")
	if got != want {
		d.println("counter = %d, want %d (%s × %s): %s", got, want,
			plural(d.cfg.workers, "worker"), plural(d.cfg.rounds, "round"), plural(int(want-got), "lost update"))
		return nil, fmt.Errorf("counter is %d, want %d: the lock did not protect it", got, want)
	}
	d.println("counter = %d = %s × %s: 0 lost updates", got, plural(d.cfg.workers, "worker"), plural(d.cfg.rounds, "round"))

	d.logMu.Lock()
	acqs := append([]acquisition(nil), d.acqs...)
	d.logMu.Unlock()
	for i := 1; i < len(acqs); i++ {
		if acqs[i].token <= acqs[i-1].token {
			d.println("fencing tokens NOT increasing: acquisition %d (%s) got %d after %d", i+1, acqs[i].who, acqs[i].token, acqs[i-1].token)
			return nil, fmt.Errorf("fencing token %d of acquisition %d is not greater than %d", acqs[i].token, i+1, acqs[i-1].token)
		}
	}
	d.println("fencing tokens strictly increasing over %s", plural(len(acqs), "acquisition"))
	return workers, nil
}

// work is one worker of phase 1.
func (d *demo) work(ctx context.Context, w *demoConn) error {
	m := w.c.Mutex(demoLock)
	for range d.cfg.rounds {
		asked := time.Now()
		lease, err := m.Lock(ctx)
		if err != nil {
			return fmt.Errorf("%s: lock: %w", w.name, err)
		}
		got := time.Now()
		d.record(w.name, lease.Token())
		d.say(w.name, "acquired", fmt.Sprintf("token=%d  (waited %s)", lease.Token(), ms(got.Sub(asked))))

		n, cerr := d.increment(ctx, w.rc, lease)
		if cerr == nil {
			// Said before Unlock, so that the next "acquired" cannot be
			// printed before it.
			d.say(w.name, "released", fmt.Sprintf("counter=%d  (held %s)", n, ms(time.Since(got))))
		}
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), demoCleanup)
		uerr := lease.Unlock(uctx)
		cancel()
		if cerr != nil {
			return fmt.Errorf("%s: %w", w.name, cerr)
		}
		if uerr != nil {
			return fmt.Errorf("%s: unlock: %w", w.name, uerr)
		}
		// Do something else for a moment before asking again, as a real
		// worker would; it also lets a waiting worker take its turn.
		if err := sleep(ctx, nil, randDuration(5*time.Millisecond, 20*time.Millisecond)); err != nil {
			return err
		}
	}
	return nil
}

// increment reads the counter, works 50-150ms and writes it back plus one.
// Without the lock, concurrent workers would overwrite each other's updates.
func (d *demo) increment(ctx context.Context, rc rueidis.Client, lease *redisync.Lease) (int64, error) {
	n, err := d.counter(ctx, rc)
	if err != nil {
		return 0, err
	}
	if err := sleep(ctx, lease.Lost(), randDuration(50*time.Millisecond, 150*time.Millisecond)); err != nil {
		return 0, err
	}
	if err := lease.Err(); err != nil {
		return 0, fmt.Errorf("lease lost while working: %w", err)
	}
	n++
	if err := rc.Do(ctx, rc.B().Set().Key(demoCounter).Value(fmt.Sprint(n)).Build()).Error(); err != nil {
		return 0, fmt.Errorf("write %s: %w", demoCounter, err)
	}
	return n, nil
}

func (d *demo) counter(ctx context.Context, rc rueidis.Client) (int64, error) {
	n, err := rc.Do(ctx, rc.B().Get().Key(demoCounter).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", demoCounter, err)
	}
	return n, nil
}

// phase2 shows a lease lost to a force-unlock, and the fencing token that
// keeps its holder's late writes out.
func (d *demo) phase2(ctx context.Context, admin, next *demoConn) error {
	name := fmt.Sprintf("worker-%d", d.cfg.workers+1)
	holder, err := d.connect(name, redisync.WithWatchdogLease(demoLease))
	if err != nil {
		return fmt.Errorf("connect %s: %w", name, err)
	}
	d.println("\nPhase 2: a holder loses its lease (watchdog lease %v, renewed every %v; loss detection %v)",
		demoLease, (demoLease / 3).Round(time.Millisecond), holder.c.LossDetection())
	lease, err := holder.c.Mutex(demoLock).Lock(ctx)
	if err != nil {
		return fmt.Errorf("%s: lock: %w", name, err)
	}
	old := lease.Token()
	d.record(name, old)
	d.say(name, "acquired", fmt.Sprintf("token=%d  (watchdog lease %v)", old, demoLease))
	if err := d.loseLease(ctx, admin, name, lease); err != nil {
		return err
	}
	tok, err := d.takeOver(ctx, next)
	if err != nil {
		return err
	}

	d.println("")
	if tok <= old {
		d.println("token %d of %s is NOT greater than %d of the lost lease", tok, next.name, old)
		return fmt.Errorf("fencing token %d is not greater than the lost lease's %d", tok, old)
	}
	d.println("token %d (%s) > %d (%s, lost): a fenced write with the old token would be rejected", tok, next.name, old, name)
	return nil
}

// loseLease has the holder name of lease work for a while, its lease being
// renewed, then has the operator break the lock by force and waits until
// the holder is told that it lost it.
func (d *demo) loseLease(ctx context.Context, admin *demoConn, name string, lease *redisync.Lease) error {
	if err := sleep(ctx, lease.Lost(), demoLease/2); err != nil {
		return err
	}
	if err := lease.Err(); err != nil {
		return fmt.Errorf("%s: lease lost before the force-unlock: %w", name, err)
	}

	forced := time.Now()
	ok, err := admin.c.Mutex(demoLock).ForceUnlock(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("force-unlock found %q free, but %s held it", demoLock, name)
	}
	d.say("operator", "unlocked", fmt.Sprintf("%q by force (ForceUnlock) while %s held it", demoLock, name))

	select {
	case <-lease.Lost():
	case <-time.After(demoLossTimeout):
		return fmt.Errorf("%s: lease not reported lost %v after the force-unlock", name, demoLossTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
	detected := time.Since(forced)
	d.logMu.Lock()
	d.lost++
	d.logMu.Unlock()
	reason := lease.Err()
	d.say(name, "lost", fmt.Sprintf("reason: %v%s  (detected %s after the force-unlock)", reason, errName(reason), ms(detected)))
	d.println("%10s%s believed it held the lock for those %s: only a fencing token keeps its writes out", "", name, ms(detected))
	return nil
}

// takeOver has next take the lock, hold it a moment and release it, and
// returns its token.
func (d *demo) takeOver(ctx context.Context, next *demoConn) (uint64, error) {
	asked := time.Now()
	nl, err := next.c.Mutex(demoLock).Lock(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: lock: %w", next.name, err)
	}
	got := time.Now()
	tok := nl.Token()
	d.record(next.name, tok)
	d.say(next.name, "acquired", fmt.Sprintf("token=%d  (waited %s)", tok, ms(got.Sub(asked))))
	werr := sleep(ctx, nl.Lost(), randDuration(50*time.Millisecond, 150*time.Millisecond))
	if werr == nil {
		d.say(next.name, "released", fmt.Sprintf("(held %s)", ms(time.Since(got))))
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), demoCleanup)
	defer cancel()
	if err := nl.Unlock(uctx); err != nil && werr == nil {
		return 0, fmt.Errorf("%s: unlock: %w", next.name, err)
	}
	return tok, werr
}

// errName names the library's loss reasons.
func errName(err error) string {
	for _, e := range []struct {
		err  error
		name string
	}{
		{redisync.ErrForceUnlocked, "ErrForceUnlocked"},
		{redisync.ErrExpired, "ErrExpired"},
		{redisync.ErrTakenOver, "ErrTakenOver"},
		{redisync.ErrConnectionLost, "ErrConnectionLost"},
		{redisync.ErrClosed, "ErrClosed"},
	} {
		if errors.Is(err, e.err) {
			return " (" + e.name + ")"
		}
	}
	return ""
}

func (d *demo) summary() {
	d.logMu.Lock()
	acqs, lost := d.acqs, d.lost
	d.logMu.Unlock()
	handoffs := 0
	for i := 1; i < len(acqs); i++ {
		if acqs[i].who != acqs[i-1].who {
			handoffs++
		}
	}
	d.println("\nSummary")
	d.println("  acquisitions  %d", len(acqs))
	d.println("  hand-offs     %d (acquisitions by another worker than the one before)", handoffs)
	d.println("  lost leases   %d", lost)
	d.println("  total time    %v", time.Since(d.start).Round(time.Millisecond))
}

// plural returns "1 thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// sleep waits for d, or until ctx ends or lost is closed (nil: never).
func sleep(ctx context.Context, lost <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-lost:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// randDuration returns a random duration in [lo, hi).
func randDuration(lo, hi time.Duration) time.Duration {
	return lo + rand.N(hi-lo)
}
