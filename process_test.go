package redisync

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync/internal/faultproxy"
)

// Worker processes: the test binary runs itself again with workerEnv set to
// a JSON workerConfig, so that locks are contended by real processes that
// tests can kill or stop. A worker reports on stdout, one line per event.
const workerEnv = "REDISYNC_WORKER"

type workerConfig struct {
	Mode   string   `json:"mode"`   // "contend" or "hold"
	Addrs  []string `json:"addrs"`  // where the Clients connect (maybe a proxy)
	Direct string   `json:"direct"` // Redis itself, for the shared counter
	Name   string   `json:"name"`
	Kind   string   `json:"kind"`  // contend: one of lockKinds
	Lease  string   `json:"lease"` // watchdog lease
	// contend: Clients × Goroutines goroutines share Acquisitions.
	Clients      int `json:"clients"`
	Goroutines   int `json:"goroutines"`
	Acquisitions int `json:"acquisitions"`
}

// contendResult is what a contend worker found.
type contendResult struct {
	Acquisitions   int `json:"acquisitions"`
	Overlaps       int `json:"overlaps"`        // another holder was inside
	StaleTokens    int `json:"stale_tokens"`    // a token not above the previous holder's
	LostWhileHeld  int `json:"lost_while_held"` // Lost closed during the critical section
	NotHeldAtEnd   int `json:"not_held_at_end"` // Unlock found the lock gone
	UnlockRetries  int `json:"unlock_retries"`  // Unlock attempts that failed on the connection
	AcquireErrors  int `json:"acquire_errors"`
	FirstErrorText string
}

func runWorker(raw string) int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Println("error", err)
		return 2
	}
	lease, err := time.ParseDuration(cfg.Lease)
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	switch cfg.Mode {
	case "contend":
		return contendWorker(cfg, lease)
	case "hold":
		return holdWorker(cfg, lease)
	}
	fmt.Println("error unknown mode", cfg.Mode)
	return 2
}

func dialWorker(cfg workerConfig, lease time.Duration) (*Client, error) {
	return Dial(rueidis.ClientOption{InitAddress: cfg.Addrs, DisableCache: true},
		WithWatchdogLease(lease), WithLogger(quietLogger()))
}

// holdWorker takes the lock, says "held TOKEN", and waits for its loss:
// "lost REASON TOKEN".
func holdWorker(cfg workerConfig, lease time.Duration) int {
	c, err := dialWorker(cfg, lease)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer c.Close()
	l, err := c.Mutex(cfg.Name).Lock(context.Background())
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("held", l.Token())
	select {
	case <-l.Lost():
		fmt.Printf("lost %s %d\n", reasonName(l.Err()), l.Token())
	case <-time.After(time.Minute):
		fmt.Println("error still held after a minute")
		return 1
	}
	return 0
}

func reasonName(err error) string {
	for _, r := range []struct {
		err  error
		name string
	}{{ErrExpired, "expired"}, {ErrTakenOver, "taken-over"}, {ErrConnectionLost, "connection-lost"}, {ErrClosed, "closed"}} {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return strings.ReplaceAll(fmt.Sprint(err), " ", "_")
}

// contendWorker hammers the lock from several Clients and goroutines,
// guarding a read-modify-write of a counter that only the lock protects.
func contendWorker(cfg workerConfig, lease time.Duration) int {
	direct, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{cfg.Direct}, DisableCache: true})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer direct.Close()
	var (
		mu   sync.Mutex
		res  contendResult
		left = cfg.Acquisitions
		wg   sync.WaitGroup
	)
	note := func(f func(r *contendResult)) { mu.Lock(); f(&res); mu.Unlock() }
	key := func(s string) string { return "{" + cfg.Name + "}:" + s }
	var clients []*Client
	for range cfg.Clients {
		c, err := dialWorker(cfg, lease)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		clients = append(clients, c)
	}
	fmt.Println("ready")
	for _, c := range clients {
		var lock func(context.Context) (*Lease, error)
		switch cfg.Kind {
		case "Mutex":
			lock = c.Mutex(cfg.Name).Lock
		case "FairMutex":
			lock = c.FairMutex(cfg.Name).Lock
		case "RWMutex":
			lock = c.RWMutex(cfg.Name).Lock
		case "Semaphore":
			s := c.Semaphore(cfg.Name)
			if _, err := s.TrySetSize(context.Background(), 1); err != nil {
				fmt.Println("error", err)
				return 1
			}
			lock = func(ctx context.Context) (*Lease, error) { return s.Lock(ctx, 1) }
		default:
			fmt.Println("error unknown kind", cfg.Kind)
			return 2
		}
		for range cfg.Goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				bg := context.Background()
				for {
					mu.Lock()
					if left == 0 {
						mu.Unlock()
						return
					}
					left--
					mu.Unlock()
					ctx, cancel := context.WithTimeout(bg, 30*time.Second)
					l, err := lock(ctx)
					cancel()
					if err != nil {
						note(func(r *contendResult) {
							r.AcquireErrors++
							if r.FirstErrorText == "" {
								r.FirstErrorText = err.Error()
							}
						})
						continue
					}
					n, _ := direct.Do(bg, direct.B().Incr().Key(key("inside")).Build()).AsInt64()
					prev, _ := direct.Do(bg, direct.B().Set().Key(key("token")).Value(strconv.FormatUint(l.Token(), 10)).Get().Build()).AsUint64()
					v, _ := direct.Do(bg, direct.B().Get().Key(key("counter")).Build()).AsInt64()
					direct.Do(bg, direct.B().Set().Key(key("counter")).Value(strconv.FormatInt(v+1, 10)).Build())
					direct.Do(bg, direct.B().Decr().Key(key("inside")).Build())
					lost := l.Err() != nil
					retries, notHeld := 0, false
					for {
						err := l.Unlock(bg)
						if err == nil {
							break
						}
						if errors.Is(err, ErrNotHeld) {
							notHeld = true
							break
						}
						retries++
						time.Sleep(5 * time.Millisecond)
					}
					note(func(r *contendResult) {
						r.Acquisitions++
						if n != 1 {
							r.Overlaps++
						}
						// Semaphore permits have no fencing tokens.
						if cfg.Kind != "Semaphore" && prev >= l.Token() {
							r.StaleTokens++
						}
						if lost {
							r.LostWhileHeld++
						}
						if notHeld {
							r.NotHeldAtEnd++
						}
						r.UnlockRetries += retries
					})
				}
			}()
		}
	}
	wg.Wait()
	for _, c := range clients {
		c.Close()
	}
	out, _ := json.Marshal(res)
	fmt.Println("result", string(out))
	return 0
}

// lockKinds are the exclusive locks contend workers take: a Mutex, a
// FairMutex, an RWMutex's write lock, a Semaphore of one permit.
var lockKinds = []string{"Mutex", "FairMutex", "RWMutex", "Semaphore"}

// worker is a running worker process.
type worker struct {
	t     testing.TB
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
}

func startWorker(t testing.TB, cfg workerConfig) *worker {
	t.Helper()
	raw, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting worker process: %v", err)
	}
	w := &worker{t: t, cmd: cmd, lines: make(chan string, 64), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
		cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		<-w.done
	})
	return w
}

// expect returns the rest of the next line that starts with word.
func (w *worker) expect(word string, timeout time.Duration) string {
	w.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-w.lines:
			if !ok {
				w.t.Fatalf("worker exited before %q", word)
			}
			if strings.HasPrefix(line, "error") {
				w.t.Fatalf("worker: %s", line)
			}
			if rest, ok := strings.CutPrefix(line, word); ok {
				return strings.TrimSpace(rest)
			}
		case <-deadline:
			w.t.Fatalf("no %q from the worker within %v", word, timeout)
		}
	}
}

func (w *worker) signal(sig syscall.Signal) {
	w.t.Helper()
	if err := w.cmd.Process.Signal(sig); err != nil {
		w.t.Fatalf("signal %v: %v", sig, err)
	}
}

func TestProcessesMutualExclusion(t *testing.T) {
	for _, kind := range lockKinds {
		t.Run(kind, func(t *testing.T) {
			eachEnv(t, func(t *testing.T, e *env) {
				const procs = 4
				total := soak(1000, 100000)
				name := "mp:" + t.Name()
				results := runContenders(t, e.addrs, e.addrs[0], name, kind, procs, total, nil)
				checkContention(t, e, name, results, total)
			})
		})
	}
}

// runContenders runs procs contend workers sharing total acquisitions and
// returns their results. during, if not nil, runs while they work.
func runContenders(t *testing.T, addrs []string, direct, name, kind string, procs, total int, during func(stop <-chan struct{})) []contendResult {
	t.Helper()
	var ws []*worker
	for i := range procs {
		n := total / procs
		if i < total%procs {
			n++
		}
		ws = append(ws, startWorker(t, workerConfig{
			Mode: "contend", Addrs: addrs, Direct: direct, Name: name, Kind: kind, Lease: "3s",
			Clients: 2, Goroutines: 2, Acquisitions: n,
		}))
	}
	for _, w := range ws {
		w.expect("ready", 30*time.Second)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if during != nil {
		wg.Add(1)
		go func() { defer wg.Done(); during(stop) }()
	}
	var results []contendResult
	for _, w := range ws {
		var r contendResult
		if err := json.Unmarshal([]byte(w.expect("result", max(5*time.Minute, time.Duration(total)*10*time.Millisecond))), &r); err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	close(stop)
	wg.Wait()
	return results
}

// checkContention checks what contend workers found and the shared counter.
func checkContention(t *testing.T, e *env, name string, results []contendResult, total int) {
	t.Helper()
	var sum contendResult
	for _, r := range results {
		sum.Acquisitions += r.Acquisitions
		sum.Overlaps += r.Overlaps
		sum.StaleTokens += r.StaleTokens
		sum.LostWhileHeld += r.LostWhileHeld
		sum.NotHeldAtEnd += r.NotHeldAtEnd
		sum.UnlockRetries += r.UnlockRetries
		sum.AcquireErrors += r.AcquireErrors
		if sum.FirstErrorText == "" {
			sum.FirstErrorText = r.FirstErrorText
		}
	}
	t.Logf("%d processes: %+v", len(results), sum)
	if sum.Overlaps != 0 || sum.StaleTokens != 0 || sum.LostWhileHeld != 0 || sum.NotHeldAtEnd != 0 || sum.AcquireErrors != 0 {
		t.Fatalf("violations: %+v", sum)
	}
	if sum.Acquisitions != total {
		t.Fatalf("%d acquisitions, want %d", sum.Acquisitions, total)
	}
	rc := e.rueidisClient(t)
	key := "{" + name + "}:counter"
	n, err := rc.Do(context.Background(), rc.B().Get().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(total) {
		t.Fatalf("counter %d after %d acquisitions: %d lost updates", n, total, int64(total)-n)
	}
	rc.Do(context.Background(), rc.B().Del().Key(key, "{"+name+"}:token", "{"+name+"}:inside").Build())
}

func TestProcessHolderKilled(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const lease = time.Second
		name := "killed:" + t.Name()
		holder := startWorker(t, workerConfig{Mode: "hold", Addrs: e.addrs, Name: name, Lease: lease.String()})
		token, _ := strconv.ParseUint(holder.expect("held", 30*time.Second), 10, 64)
		next := e.client(t).Mutex(name).Acquire(context.Background())
		holder.signal(syscall.SIGKILL)
		killed := time.Now()
		select {
		case l := <-next:
			took := time.Since(killed)
			if l.Err() != nil {
				t.Fatal(l.Err())
			}
			t.Logf("acquired %v after the holder was killed (lease %v)", took, lease)
			if took > lease+time.Second {
				t.Fatalf("took %v, more than the lease %v plus 1s", took, lease)
			}
			if l.Token() <= token {
				t.Fatalf("token %d not above the dead holder's %d", l.Token(), token)
			}
			l.Unlock(context.Background())
		case <-time.After(10 * time.Second):
			t.Fatal("lock never acquired after its holder was killed")
		}
	})
}

func TestProcessHolderPaused(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const lease = time.Second
		name := "paused:" + t.Name()
		holder := startWorker(t, workerConfig{Mode: "hold", Addrs: e.addrs, Name: name, Lease: lease.String()})
		holder.expect("held", 30*time.Second)
		next := e.client(t).Mutex(name).Acquire(context.Background())
		holder.signal(syscall.SIGSTOP)
		var l *Lease
		select {
		case l = <-next:
			if l.Err() != nil {
				t.Fatal(l.Err())
			}
		case <-time.After(10 * time.Second):
			holder.signal(syscall.SIGCONT)
			t.Fatal("lock not taken over from a stopped holder")
		}
		holder.signal(syscall.SIGCONT)
		fields := strings.Fields(holder.expect("lost", 10*time.Second))
		old, _ := strconv.ParseUint(fields[1], 10, 64)
		t.Logf("resumed holder reports %s; token %d < %d", fields[0], old, l.Token())
		if fields[0] != "connection-lost" && fields[0] != "taken-over" {
			t.Fatalf("reason %q", fields[0])
		}
		if old >= l.Token() {
			t.Fatalf("old holder's token %d not below the new holder's %d", old, l.Token())
		}
		l.Unlock(context.Background())
	})
}

// Mutual exclusion across processes whose connections are cut at random.
func TestProcessesMutualExclusionUnderCuts(t *testing.T) {
	for _, kind := range lockKinds {
		t.Run(kind, func(t *testing.T) {
			testCuts(t, kind)
		})
	}
}

func testCuts(t *testing.T, kind string) {
	e := ownServer(t)
	p, err := faultproxy.New(e.server.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	const procs = 4
	total := soak(1000, 100000)
	name := "cuts"
	cuts := 0
	results := runContenders(t, []string{p.Addr()}, e.server.Addr, name, kind, procs, total, func(stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(20+rand.IntN(80)) * time.Millisecond):
				// One connection, or now and then all of them.
				if open := p.Open(); len(open) > 0 {
					if rand.IntN(10) == 0 {
						p.Cut()
					} else {
						p.CutConn(open[rand.IntN(len(open))])
					}
					cuts++
				}
			}
		}
	})
	t.Logf("%d cuts", cuts)
	checkContention(t, e, name, results, total)
}
