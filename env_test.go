package redisync

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

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
func ownServer(t testing.TB, args ...string) *env {
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
// owns, as users get it from Dial (LossDetection DetectOnChange); closed at
// the end of the test unless closed before.
func (e *env) client(t testing.TB, opts ...Option) *Client {
	t.Helper()
	c, err := Dial(rueidis.ClientOption{InitAddress: e.addrs}, append([]Option{WithLogger(quietLogger())}, opts...)...)
	if err != nil {
		t.Fatalf("connecting to %s redis at %v: %v", e.name, e.addrs, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// renewalClient returns a Client made with New on a rueidis.Client of the
// test's (LossDetection DetectOnRenewal); closed at the end of the test.
func (e *env) renewalClient(t testing.TB, opts ...Option) *Client {
	t.Helper()
	c, err := New(e.rueidisClient(t), append([]Option{WithLogger(quietLogger())}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
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

// onClients returns n handles that handle makes, each on a Client of the
// env of its own (see client).
func onClients[H any](t testing.TB, e *env, n int, handle func(*Client) H) []H {
	t.Helper()
	hs := make([]H, n)
	for i, c := range e.clients(t, n) {
		hs[i] = handle(c)
	}
	return hs
}

// dial returns a Client that owns its connection to addrs (see Dial),
// without client-side caching (LossDetection DetectOnRenewal: the fault
// tests count on renewals); closed at the end of the test unless closed
// before.
func dial(t testing.TB, addrs []string, opts ...Option) *Client {
	t.Helper()
	return dialWith(t, rueidis.ClientOption{InitAddress: addrs, DisableCache: true}, opts...)
}

// dialWith returns a Client dialed with opt and quiet logs, closed at the
// end of the test.
func dialWith(t testing.TB, opt rueidis.ClientOption, opts ...Option) *Client {
	t.Helper()
	c, err := Dial(opt, append([]Option{WithLogger(quietLogger())}, opts...)...)
	if err != nil {
		t.Fatalf("dialing %v: %v", opt.InitAddress, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// proxiedOption is the option of a Client whose connection goes through a
// fault proxy at addr: one connection for commands, so that every call
// after the first takes the connection the first opened. A call that
// opens a connection waits for its handshake whatever its context says
// (see Dial), which a test of a late reply must not run into.
func proxiedOption(addr string) rueidis.ClientOption {
	return rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, PipelineMultiplex: -1}
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
	c := dialWith(t, proxiedOption(p.Addr()), opts...)
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

// restartPair returns a server of the test's own, started with the
// redis-server args, for the test to restart, and two Clients of it, a
// holder and a waiter, with the watchdog lease. The test ends with done,
// which checks that nobody subscribes any more and that no goroutine is
// left (the Clients' and the restarted server's aside).
func restartPair(t *testing.T, lease time.Duration, args ...string) (e *env, holder, waiter *Client, done func()) {
	t.Helper()
	e = ownServer(t, args...)
	noLeak := leakCheck(t)
	holder, waiter = e.client(t, WithWatchdogLease(lease)), e.client(t, WithWatchdogLease(lease))
	return e, holder, waiter, func() {
		t.Helper()
		e.requireNoSubscriptions(t)
		noLeak([]*Client{holder, waiter}, restartedServer)
	}
}

// ackedClient returns a server of the test's own with one replica, and a
// Client of it whose acquisitions wait for the replica's acknowledgement
// (300ms at most). The test may pause the replica.
func ackedClient(t *testing.T) (*env, *Client, *redistest.Server) {
	t.Helper()
	e := ownServer(t)
	replica := e.replica(t)
	return e, e.client(t, WithReplicaAck(1, 300*time.Millisecond)), replica
}

// requireReply requires the reply of a command on srv to be want.
func requireReply(t testing.TB, srv *redistest.Server, want, msg string, args ...string) {
	t.Helper()
	got, err := srv.Do(args...)
	require.NoError(t, err)
	require.Equal(t, want, got, msg)
}

// requireLockOwner checks that the lock hash (a Mutex's, a FairMutex's)
// on srv names want as its owner.
func requireLockOwner(t testing.TB, srv *redistest.Server, key, want, msg string) {
	t.Helper()
	requireReply(t, srv, want, msg, "HGET", key, "owner")
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

// soak returns n, or long when REDISYNC_SOAK is set (make soak).
func soak(n, long int) int {
	if os.Getenv("REDISYNC_SOAK") != "" {
		return long
	}
	return n
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

// exampleClient is the Client the examples share: connected by the first
// that asks for it, closed by TestMain.
var exampleClient *Client

// clientForExamples connects exampleClient on first use.
func clientForExamples() *Client {
	addr := redisAddr()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if exampleClient == nil {
		c, err := Dial(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			panic("connecting the examples' Client: " + err.Error())
		}
		exampleClient = c
	}
	return exampleClient
}
