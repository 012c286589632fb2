package redisync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redisync/redisync/internal/faultproxy"
	"github.com/redisync/redisync/internal/redistest"
)

// The servers shared by the tests of this package: started on first use,
// stopped after the last test.
var (
	sharedMu      sync.Mutex
	sharedServer  *redistest.Server
	sharedCluster *redistest.Cluster
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(workerEnv); cfg != "" {
		os.Exit(runWorker(cfg))
	}
	code := m.Run()
	sharedMu.Lock()
	if sharedServer != nil {
		sharedServer.Stop()
	}
	if sharedCluster != nil {
		sharedCluster.Stop()
	}
	sharedMu.Unlock()
	if code == 0 {
		if err := goleak.Find(rueidisLingering...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// rueidisLingering are goroutines a closed rueidis cluster client leaves
// behind for a few seconds: the delayed close of the connections a topology
// refresh dropped, and a delayed refresh.
var rueidisLingering = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
	goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo"),
}

// env is one Redis deployment the tests run against.
type env struct {
	name    string
	addrs   []string
	cluster *redistest.Cluster
	server  *redistest.Server
}

func standaloneEnv(t testing.TB) *env {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedServer == nil {
		s, err := redistest.StartServer()
		if err != nil {
			t.Fatalf("starting redis-server: %v", err)
		}
		sharedServer = s
	}
	return &env{name: "standalone", addrs: []string{sharedServer.Addr}, server: sharedServer}
}

func clusterEnv(t testing.TB) *env {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedCluster == nil {
		c, err := redistest.StartCluster(3, 1)
		if err != nil {
			t.Fatalf("starting redis cluster: %v", err)
		}
		sharedCluster = c
	}
	return &env{name: "cluster", addrs: sharedCluster.Addrs(), cluster: sharedCluster}
}

// eachEnv runs f against standalone Redis and the 3-master Cluster.
func eachEnv(t *testing.T, f func(t *testing.T, e *env)) {
	t.Run("standalone", func(t *testing.T) { f(t, standaloneEnv(t)) })
	t.Run("cluster", func(t *testing.T) { f(t, clusterEnv(t)) })
}

// ownServer is a standalone env of its own, started with the redis-server
// args, that the test may restart or pause; stopped at the end of the test.
func ownServer(t *testing.T, args ...string) *env {
	s := redistest.Standalone(t, args...)
	return &env{name: "standalone", addrs: []string{s.Addr}, server: s}
}

// ownCluster is a Cluster the test may fail over.
func ownCluster(t *testing.T) *env {
	c := redistest.NewCluster(t, 3, 1)
	return &env{name: "cluster", addrs: c.Addrs(), cluster: c}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// rueidisClient connects to the env; closed at the end of the test.
func (e *env) rueidisClient(t testing.TB) rueidis.Client {
	t.Helper()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: e.addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("connecting to %s redis at %v: %v", e.name, e.addrs, err)
	}
	t.Cleanup(rc.Close)
	return rc
}

// client returns a Client of the env on a connection of its own, which it
// owns (see Dial); closed at the end of the test unless closed before.
func (e *env) client(t testing.TB, opts ...Option) *Client {
	t.Helper()
	return dial(t, e.addrs, opts...)
}

// clients returns n Clients of the env (see client).
func (e *env) clients(t testing.TB, n int, opts ...Option) []*Client {
	t.Helper()
	cs := make([]*Client, n)
	for i := range cs {
		cs[i] = e.client(t, opts...)
	}
	return cs
}

// dial returns a Client that owns its connection to addrs (see Dial);
// closed at the end of the test unless closed before.
func dial(t testing.TB, addrs []string, opts ...Option) *Client {
	t.Helper()
	c, err := Dial(rueidis.ClientOption{InitAddress: addrs, DisableCache: true}, append([]Option{WithLogger(quietLogger())}, opts...)...)
	if err != nil {
		t.Fatalf("dialing %v: %v", addrs, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// proxied returns a Client whose connection to the env's standalone server
// goes through a fault proxy, and the proxy; both closed at the end of the
// test, the proxy healed first.
func (e *env) proxied(t testing.TB, opts ...Option) (*Client, *faultproxy.Proxy) {
	t.Helper()
	p, err := faultproxy.New(e.server.Addr)
	if err != nil {
		t.Fatalf("starting a fault proxy: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	c := dial(t, []string{p.Addr()}, opts...)
	t.Cleanup(p.Heal)
	return c, p
}

// masters are the env's servers that hold data: the standalone server, or
// the Cluster's masters.
func (e *env) masters() []*redistest.Server {
	if e.cluster != nil {
		return e.cluster.Masters
	}
	return []*redistest.Server{e.server}
}

// replica starts a replica of the env's standalone server and waits until
// it is in sync; stopped at the end of the test.
func (e *env) replica(t *testing.T) *redistest.Server {
	t.Helper()
	replica := redistest.Standalone(t, "--replicaof", "127.0.0.1", strconv.Itoa(e.server.Port))
	eventually(t, 10*time.Second, func() bool {
		info, err := replica.Do("INFO", "replication")
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, "replica did not sync")
	return replica
}

// keys lists the keys matching pattern on every master of the env.
func (e *env) keys(t testing.TB, pattern string) []string {
	t.Helper()
	var out []string
	for _, s := range e.masters() {
		out = append(out, lines(t, s, "KEYS", pattern)...)
	}
	return out
}

// channels lists the pub/sub channels (classic and sharded) with
// subscribers on every master of the env.
func (e *env) channels(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, s := range e.masters() {
		out = append(out, lines(t, s, "PUBSUB", "CHANNELS")...)
		out = append(out, lines(t, s, "PUBSUB", "SHARDCHANNELS")...)
	}
	return out
}

// lines runs a command on s and returns the lines of its reply.
func lines(t testing.TB, s *redistest.Server, args ...string) []string {
	t.Helper()
	r, err := s.Do(args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	var out []string
	for _, l := range strings.Split(r, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// requireNoSubscriptions waits until no Client subscribes to any channel of
// the env.
func (e *env) requireNoSubscriptions(t testing.TB) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool { return len(e.channels(t)) == 0 }, "subscriptions left: %v", e.channels(t))
}

// requireOnlyFences waits until the keys under prefix ("redisync:" for the
// default prefix) are fencing counters only: nothing held, nobody queued.
func (e *env) requireOnlyFences(t testing.TB, prefix string) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool {
		for _, k := range e.keys(t, prefix+"*") {
			if !slices.Contains([]string{"fence", "fairfence", "rwfence"}, strings.SplitN(strings.TrimPrefix(k, prefix), ":", 2)[0]) {
				return false
			}
		}
		return true
	}, "keys left: %v", e.keys(t, prefix+"*"))
}

// requireNothingLeft waits until nothing of the locks under prefix is left
// in the env but their fencing counters, and nobody subscribes.
func (e *env) requireNothingLeft(t testing.TB, prefix string) {
	t.Helper()
	e.requireOnlyFences(t, prefix)
	e.requireNoSubscriptions(t)
}

// leakCheck notes the goroutines running now. The function it returns
// closes clients and checks that no goroutine started since is left (but
// those that closed rueidis clients leave for a while, and extra).
func leakCheck(t *testing.T) func(clients []*Client, extra ...goleak.Option) {
	ignore := goleak.IgnoreCurrent()
	return func(clients []*Client, extra ...goleak.Option) {
		t.Helper()
		for _, c := range clients {
			require.NoError(t, c.Close())
		}
		goleak.VerifyNone(t, append(append(rueidisLingering, ignore), extra...)...)
	}
}

// soak returns n, or long when REDISYNC_SOAK is set (make soak).
func soak(n, long int) int {
	if os.Getenv("REDISYNC_SOAK") != "" {
		return long
	}
	return n
}

// spread runs f total times on workers goroutines: f gets the worker's
// number and the call's (0 to total-1, in the order the calls start).
func spread(total, workers int, f func(worker, call int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := int(next.Add(1)) - 1
				if n >= total {
					return
				}
				f(w, n)
			}
		}()
	}
	wg.Wait()
}

// churn makes total acquisitions on workers goroutines, most of them given
// up before they acquire or while they wait: acquire gets the worker's
// number and a context that ends after wait() (by default a random time
// below maxWait). A lease acquired is held for a moment and unlocked; an
// Unlock that finds it lost (ErrNotHeld) is no failure. It returns how many
// leases were acquired.
func churn(t *testing.T, total, workers int, wait func() time.Duration, acquire func(ctx context.Context, worker int) (*Lease, error)) int {
	var acquired atomic.Int64
	spread(total, workers, func(w, _ int) {
		ctx, cancel := context.WithTimeout(context.Background(), wait())
		defer cancel()
		l, err := acquire(ctx, w)
		if err != nil {
			return
		}
		acquired.Add(1)
		time.Sleep(rand.N(200 * time.Microsecond))
		if err := l.Unlock(context.Background()); err != nil && !errors.Is(err, ErrNotHeld) {
			t.Error(err)
		}
	})
	return int(acquired.Load())
}

// cancellations runs churn (total acquisitions on 24 goroutines, each
// ending after wait()) over three Clients of e with prefix: acquire gets
// the worker's Client and all three. It checks that leases were acquired
// and, once all ended, that nothing is left: nothing held or queued, no
// subscription, no goroutine.
func cancellations(t *testing.T, e *env, prefix string, total int, wait func() time.Duration,
	acquire func(ctx context.Context, c *Client, clients []*Client) (*Lease, error)) {
	t.Helper()
	noLeak := leakCheck(t)
	clients := e.clients(t, 3, WithPrefix(prefix))
	acquired := churn(t, total, 24, wait, func(ctx context.Context, w int) (*Lease, error) {
		return acquire(ctx, clients[w%len(clients)], clients)
	})
	t.Logf("%d attempts, %d acquired", total, acquired)
	require.NotZero(t, acquired)
	e.requireNothingLeft(t, prefix+":")
	noLeak(clients)
}

// errNoLease is what a churn acquisition that takes nothing returns.
var errNoLease = errors.New("no lease taken")

// below returns random durations below d.
func below(d time.Duration) func() time.Duration {
	return func() time.Duration { return rand.N(d) }
}

// oneOf returns one of the forms of acquisition, picked at random.
func oneOf(forms ...func(context.Context) (*Lease, error)) func(context.Context) (*Lease, error) {
	return forms[rand.IntN(len(forms))]
}

// waited makes an Acquire a form like Lock: it waits for the Lease until
// ctx ends.
func waited(acquire func(context.Context) <-chan *Lease) func(context.Context) (*Lease, error) {
	return func(ctx context.Context) (*Lease, error) {
		select {
		case l := <-acquire(ctx):
			return l, l.Err()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// errorsIsAny reports whether err is one of targets.
func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// nested acquires with lock n times, each time with the context of the
// lease before, runs inside while all are held, and unlocks them in turn.
func nested(ctx context.Context, lock func(context.Context) (*Lease, error), n int, inside func()) error {
	l, err := lock(ctx)
	if err != nil {
		return err
	}
	defer l.Unlock(context.Background())
	if n > 1 {
		return nested(l.Context(), lock, n-1, inside)
	}
	inside()
	return nil
}

// repeatUntil runs f over and over on a goroutine of wg, until stop is
// closed or f fails (a test error).
func repeatUntil(t testing.TB, wg *sync.WaitGroup, stop <-chan struct{}, f func() error) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := f(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
}

// withTimeout returns a context that ends after d, or with the test.
func withTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond for up to d.
func eventually(t testing.TB, d time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf(msg, args...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// redisAddr is the address of a Redis server for the examples.
func redisAddr() string {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedServer == nil {
		s, err := redistest.StartServer()
		if err != nil {
			panic("starting redis-server for the examples: " + err.Error())
		}
		sharedServer = s
	}
	return sharedServer.Addr
}

// recv waits for the Lease an Acquire delivers, at most within, and
// requires it to hold.
func recv(t testing.TB, ch <-chan *Lease, within time.Duration, what string) *Lease {
	t.Helper()
	select {
	case l := <-ch:
		require.NotNil(t, l)
		require.NoError(t, l.Err(), what)
		return l
	case <-time.After(within):
		t.Fatalf("%s: nothing within %v", what, within)
		return nil
	}
}

// delivered waits for the one Lease an Acquire delivers, failed or not,
// and checks that the channel is closed after it.
func delivered(t testing.TB, ch <-chan *Lease) *Lease {
	t.Helper()
	select {
	case l, ok := <-ch:
		require.True(t, ok, "Acquire closed its channel without a Lease")
		require.NotNil(t, l, "Acquire delivered a nil Lease")
		_, ok = <-ch
		require.False(t, ok, "Acquire delivered more than one Lease")
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire delivered nothing")
		return nil
	}
}

// pending reports whether an Acquire channel has delivered nothing yet.
func pending(ch <-chan *Lease) bool {
	return len(ch) == 0
}

// requireLost waits for l to be lost, at most within, and checks that the
// reason (Err, the cause of Context) is one of reasons.
func requireLost(t testing.TB, l *Lease, within time.Duration, reasons ...error) {
	t.Helper()
	select {
	case <-l.Lost():
	case <-time.After(within):
		t.Fatalf("lease %s not lost within %v", l.Name(), within)
	}
	for _, err := range []error{l.Err(), context.Cause(l.Context())} {
		require.True(t, errorsIsAny(err, reasons...), "reason %v, not one of %v", err, reasons)
	}
}

// restartedServer is the goroutine that waits for a redis-server restarted
// by the test.
var restartedServer = goleak.IgnoreAnyFunction("github.com/redisync/redisync/internal/redistest.(*Server).start.func1")

// unlockAll receives the Lease from every channel concurrently, each within
// d, and unlocks it; a failed acquisition or a timeout fails the test.
func unlockAll(t testing.TB, ctx context.Context, chans []<-chan *Lease, d time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	for i, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case l := <-ch:
				if err := l.Err(); err != nil {
					t.Errorf("waiter %d: %v", i, err)
					return
				}
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("waiter %d: %v", i, err)
				}
			case <-time.After(d):
				t.Errorf("waiter %d did not acquire within %v", i, d)
			}
		}()
	}
	wg.Wait()
}
