// Package testenv is what the tests of this module's packages share: the
// Redis deployments they run against (a standalone server and a 3-master
// Cluster, started on first use and shared by a test binary's tests, or a
// server or Cluster of one test's own), a rueidis.Client that holds back
// or loses the replies of chosen commands (ReplyFaults), the goroutine
// leak checks, the seed of the randomized tests, and small polling and
// reading helpers. It knows nothing of the locks themselves: each
// package's tests make their Clients over an Env.
//
// It is for tests only: no package of the library imports it.
package testenv

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redisync/redisync/internal/faultproxy"
	"github.com/redisync/redisync/internal/redistest"
)

// The servers shared by the tests of one test binary: started on first
// use, stopped by Main after the last test.
var (
	sharedMu      sync.Mutex
	sharedServer  *redistest.Server
	sharedCluster *redistest.Cluster
)

// Env is one Redis deployment the tests run against.
type Env struct {
	// Name is "standalone" or "cluster".
	Name string
	// Addrs are the addresses to connect to.
	Addrs []string
	// Cluster is the Cluster, nil for a standalone server.
	Cluster *redistest.Cluster
	// Server is the standalone server, nil for a Cluster.
	Server *redistest.Server
}

// Standalone is the standalone server the test binary's tests share.
func Standalone(t testing.TB) *Env {
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
	return &Env{Name: "standalone", Addrs: []string{sharedServer.Addr}, Server: sharedServer}
}

// Cluster is the 3-master Cluster (one replica each) the test binary's
// tests share.
func Cluster(t testing.TB) *Env {
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
	return &Env{Name: "cluster", Addrs: sharedCluster.Addrs(), Cluster: sharedCluster}
}

// Each runs f as the subtests "standalone" and "cluster", against the
// shared standalone server and Cluster, each made into the tests' own env
// type by wrap.
func Each[E any](t *testing.T, wrap func(*Env) E, f func(t *testing.T, e E)) {
	t.Run("standalone", func(t *testing.T) { f(t, wrap(Standalone(t))) })
	t.Run("cluster", func(t *testing.T) { f(t, wrap(Cluster(t))) })
}

// OwnServer is a standalone server of the test's own, started with the
// redis-server args, that the test may restart or pause; stopped at the
// end of the test.
func OwnServer(t testing.TB, args ...string) *Env {
	s := redistest.Standalone(t, args...)
	return &Env{Name: "standalone", Addrs: []string{s.Addr}, Server: s}
}

// OwnCluster is a Cluster of the test's own, which it may fail over.
func OwnCluster(t *testing.T) *Env {
	c := redistest.NewCluster(t, 3, 1)
	return &Env{Name: "cluster", Addrs: c.Addrs(), Cluster: c}
}

// SharedAddr is the address of the shared standalone server, for examples,
// which have no testing.TB: it panics when the server cannot start.
func SharedAddr() string {
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

// Main runs the tests of m (TestMain's), then after, then stops the shared
// servers, and fails the binary when goroutines are left (goleak), those
// of RueidisLingering aside.
func Main(m *testing.M, after func()) {
	goleak.VerifyTestMain(mainRunner{m, after}, RueidisLingering...)
}

type mainRunner struct {
	m     *testing.M
	after func()
}

// Run runs the tests, then after, then stops the shared servers.
func (r mainRunner) Run() int {
	code := r.m.Run()
	if r.after != nil {
		r.after()
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedServer != nil {
		sharedServer.Stop()
	}
	if sharedCluster != nil {
		sharedCluster.Stop()
	}
	return code
}

// RueidisLingering are goroutines a closed rueidis cluster client leaves
// behind for a few seconds: the delayed close of the connections a
// topology refresh dropped, and a delayed refresh.
var RueidisLingering = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
	goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
}

// RestartedServer is the goroutine that waits for a redis-server a test
// restarted.
var RestartedServer = goleak.IgnoreAnyFunction("github.com/redisync/redisync/internal/redistest.(*Server).start.func1")

// LeakCheck notes the goroutines running now. The function it returns
// closes clients and checks that no goroutine started since is left (but
// those that closed rueidis clients leave for a while, and extra).
func LeakCheck[C io.Closer](t *testing.T) func(clients []C, extra ...goleak.Option) {
	ignore := goleak.IgnoreCurrent()
	return func(closers []C, extra ...goleak.Option) {
		t.Helper()
		for _, c := range closers {
			require.NoError(t, c.Close())
		}
		goleak.VerifyNone(t, append(append(append([]goleak.Option(nil), RueidisLingering...), ignore), extra...)...)
	}
}

// Map returns f of each of xs, in order: the handles of a test's Clients.
func Map[X, Y any](xs []X, f func(X) Y) []Y {
	ys := make([]Y, len(xs))
	for i, x := range xs {
		ys[i] = f(x)
	}
	return ys
}

// QuietLogger discards what it is told.
func QuietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// RueidisClient connects to the env without client-side caching; closed
// at the end of the test.
func (e *Env) RueidisClient(t testing.TB) rueidis.Client {
	t.Helper()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: e.Addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("connecting to %s redis at %v: %v", e.Name, e.Addrs, err)
	}
	t.Cleanup(rc.Close)
	return rc
}

// Masters are the env's servers that hold data: the standalone server, or
// the Cluster's masters.
func (e *Env) Masters() []*redistest.Server {
	if e.Cluster != nil {
		return e.Cluster.Masters
	}
	return []*redistest.Server{e.Server}
}

// Replica starts a replica of the env's standalone server and waits until
// it is in sync; stopped at the end of the test.
func (e *Env) Replica(t *testing.T) *redistest.Server {
	t.Helper()
	replica := redistest.Standalone(t, "--replicaof", "127.0.0.1", strconv.Itoa(e.Server.Port))
	Eventually(t, 10*time.Second, func() bool {
		info, err := replica.Do("INFO", "replication")
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, "replica did not sync")
	return replica
}

// Keys lists the keys matching pattern on every master of the env.
func (e *Env) Keys(t testing.TB, pattern string) []string {
	t.Helper()
	var out []string
	for _, s := range e.Masters() {
		out = append(out, Lines(t, s, "KEYS", pattern)...)
	}
	return out
}

// Channels lists the pub/sub channels (classic and sharded) with
// subscribers on every master of the env.
func (e *Env) Channels(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, s := range e.Masters() {
		out = append(out, Lines(t, s, "PUBSUB", "CHANNELS")...)
		out = append(out, Lines(t, s, "PUBSUB", "SHARDCHANNELS")...)
	}
	return out
}

// AwaitChannels waits, at most within, until exactly n channels of the env
// have subscribers. A failure reports msg and the channels last seen.
func (e *Env) AwaitChannels(t testing.TB, n int, within time.Duration, msg string) {
	t.Helper()
	var last []string
	Eventually(t, within, func() bool {
		last = e.Channels(t)
		return len(last) == n
	}, "%s; channels: %v", msg, &last)
}

// RequireNoSubscriptions waits until no client subscribes to any channel
// of the env.
func (e *Env) RequireNoSubscriptions(t testing.TB) {
	t.Helper()
	e.AwaitChannels(t, 0, 10*time.Second, "subscriptions left")
}

// RequireOnlyFences waits until the keys under prefix ("redisync:" for the
// default prefix) are fencing counters only (see LeftOverScript): nothing
// held, nobody queued.
func (e *Env) RequireOnlyFences(t testing.TB, prefix string) {
	t.Helper()
	var left []string
	Eventually(t, 10*time.Second, func() bool {
		left = nil
		for _, s := range e.Masters() {
			left = append(left, LeftOver(t, s, prefix+"*")...)
		}
		return len(left) == 0
	}, "keys left: %q", &left)
}

// LeftOverScript lists the keys matching ARGV[1] that are not fencing
// counters. A fencing counter is a hash without an owner (or with an empty
// one) that expires and holds a token ('token': a free Mutex or FairMutex;
// 't' or 'r': an RWMutex's fence hash).
const LeftOverScript = `
local out = {}
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
  local fence = redis.call('TYPE', k).ok == 'hash' and (redis.call('HGET', k, 'owner') or '') == ''
    and redis.call('PTTL', k) > 0
    and (redis.call('HEXISTS', k, 'token') + redis.call('HEXISTS', k, 't') + redis.call('HEXISTS', k, 'r')) > 0
  if not fence then
    out[#out + 1] = k
  end
end
return out`

// LeftOver returns the keys matching pattern on s that are not fencing
// counters (LeftOverScript), in one call.
func LeftOver(t testing.TB, s *redistest.Server, pattern string) []string {
	t.Helper()
	return Lines(t, s, "EVAL", LeftOverScript, "0", pattern)
}

// RequireNothingLeft waits until nothing of the locks under prefix is left
// in the env but their fencing counters, and nobody subscribes.
func (e *Env) RequireNothingLeft(t testing.TB, prefix string) {
	t.Helper()
	e.RequireOnlyFences(t, prefix)
	e.RequireNoSubscriptions(t)
}

// Proxy starts a fault proxy in front of the env's standalone server, and
// returns it with the option of a rueidis client whose connection goes
// through it: one connection for commands, so that every call after the
// first takes the connection the first opened (a call that opens a
// connection waits for its handshake whatever its context says, which a
// test of a late reply must not run into). The proxy is closed at the end
// of the test; register t.Cleanup(p.Heal) once the client is made, so that
// the proxy heals before the client closes.
func (e *Env) Proxy(t testing.TB) (*faultproxy.Proxy, rueidis.ClientOption) {
	t.Helper()
	p, err := faultproxy.New(e.Server.Addr)
	if err != nil {
		t.Fatalf("starting a fault proxy: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p, ProxiedOption(p.Addr())
}

// ProxiedOption is the option of a rueidis client whose connection goes
// through the fault proxy at addr (see Proxy).
func ProxiedOption(addr string) rueidis.ClientOption {
	return rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, PipelineMultiplex: -1}
}

// CommandCalls sums, over the env's masters, the calls of each command
// (lower case, as INFO commandstats names them) since the servers
// started.
func (e *Env) CommandCalls(t testing.TB) map[string]int64 {
	t.Helper()
	sum := make(map[string]int64)
	for _, s := range e.Masters() {
		for _, l := range Lines(t, s, "INFO", "commandstats") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(l, "cmdstat_"), ":calls=")
			if !ok {
				continue
			}
			n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			sum[name] += n
		}
	}
	return sum
}

// Lines runs a command on s and returns the lines of its reply.
func Lines(t testing.TB, s *redistest.Server, args ...string) []string {
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

// RequireReply requires the reply of a command on srv to be want.
func RequireReply(t testing.TB, srv *redistest.Server, want, msg string, args ...string) {
	t.Helper()
	got, err := srv.Do(args...)
	require.NoError(t, err)
	require.Equal(t, want, got, msg)
}

// Soak returns n, or long when REDISYNC_SOAK is set (make soak).
func Soak(n, long int) int {
	if os.Getenv("REDISYNC_SOAK") != "" {
		return long
	}
	return n
}

// WithTimeout returns a context that ends after d, or with the test.
func WithTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond every 10ms for up to d, and fails the test with
// msg formatted with args when it never held.
func Eventually(t testing.TB, d time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf(msg, args...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// seedFlag replays the randomized tests of a test binary.
var seedFlag = flag.Uint64("seed", 0, "seed of the randomized tests (0: random; REDISYNC_SEED works too)")

// Seed returns the seed of the randomized test name, from -seed,
// REDISYNC_SEED or the clock, and logs how to replay it.
func Seed(t *testing.T, name string) uint64 {
	seed := *seedFlag
	if s := os.Getenv("REDISYNC_SEED"); seed == 0 && s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("REDISYNC_SEED=%q: %v", s, err)
		}
		seed = v
	}
	if seed == 0 {
		seed = rand.Uint64()>>1 | 1
	}
	t.Logf("seed %d; replay with: go test -race -run '^%s$' -seed %d .", seed, name, seed)
	return seed
}
