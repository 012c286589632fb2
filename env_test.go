package redisync

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync/internal/faultproxy"
	"github.com/redisync/redisync/internal/redistest"
	"github.com/redisync/redisync/internal/testenv"
)

// env is one Redis deployment the tests run against (see testenv.Env),
// with its fields as the tests of this package name them; a test may make
// one of its own.
type env struct {
	name    string
	addrs   []string
	cluster *redistest.Cluster
	server  *redistest.Server
}

func wrapEnv(te *testenv.Env) *env {
	return &env{name: te.Name, addrs: te.Addrs, cluster: te.Cluster, server: te.Server}
}

// te is e as package testenv has it.
func (e *env) te() *testenv.Env {
	return &testenv.Env{Name: e.name, Addrs: e.addrs, Cluster: e.cluster, Server: e.server}
}

// standaloneEnv and clusterEnv are the standalone server and the 3-master
// Cluster the tests share.
func standaloneEnv(t testing.TB) *env { return wrapEnv(testenv.Standalone(t)) }

func clusterEnv(t testing.TB) *env { return wrapEnv(testenv.Cluster(t)) }

// eachEnv runs f against standalone Redis and the 3-master Cluster.
func eachEnv(t *testing.T, f func(t *testing.T, e *env)) { testenv.Each(t, wrapEnv, f) }

// ownServer is a standalone env of its own, started with the redis-server
// args, that the test may restart or pause; stopped at the end of the test.
func ownServer(t testing.TB, args ...string) *env { return wrapEnv(testenv.OwnServer(t, args...)) }

// ownCluster is a Cluster the test may fail over.
func ownCluster(t *testing.T) *env { return wrapEnv(testenv.OwnCluster(t)) }

// The helpers of package testenv, as the tests of this package name them.
var (
	quietLogger  = testenv.QuietLogger
	requireReply = testenv.RequireReply
	lines        = testenv.Lines
	soak         = testenv.Soak
	withTimeout  = testenv.WithTimeout
	eventually   = testenv.Eventually
)

// rueidisClient connects to the env; closed at the end of the test.
func (e *env) rueidisClient(t testing.TB) rueidis.Client { return e.te().RueidisClient(t) }

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
	return testenv.Map(e.clients(t, n), handle)
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
// fault proxy at addr (see testenv.ProxiedOption).
var proxiedOption = testenv.ProxiedOption

// proxied returns a Client whose connection to the env's standalone server
// goes through a fault proxy, and the proxy; both closed at the end of the
// test, the proxy healed first.
func (e *env) proxied(t testing.TB, opts ...Option) (*Client, *faultproxy.Proxy) {
	t.Helper()
	p, opt := e.te().Proxy(t)
	c := dialWith(t, opt, opts...)
	t.Cleanup(p.Heal)
	return c, p
}

// masters are the env's servers that hold data.
func (e *env) masters() []*redistest.Server { return e.te().Masters() }

// replica starts a replica of the env's standalone server and waits until
// it is in sync; stopped at the end of the test.
func (e *env) replica(t *testing.T) *redistest.Server { return e.te().Replica(t) }

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

// requireLockOwner checks that the lock hash (a Mutex's, a FairMutex's)
// on srv names want as its owner.
func requireLockOwner(t testing.TB, srv *redistest.Server, key, want, msg string) {
	t.Helper()
	requireReply(t, srv, want, msg, "HGET", key, "owner")
}

// keys lists the keys matching pattern on every master of the env.
func (e *env) keys(t testing.TB, pattern string) []string { return e.te().Keys(t, pattern) }

// channels lists the pub/sub channels with subscribers in the env.
func (e *env) channels(t testing.TB) []string { return e.te().Channels(t) }

// redisAddr is the address of a Redis server for the examples.
func redisAddr() string { return testenv.SharedAddr() }

// exampleMu guards exampleClient.
var exampleMu sync.Mutex

// exampleClient is the Client the examples share: connected by the first
// that asks for it, closed by TestMain.
var exampleClient *Client

// clientForExamples connects exampleClient on first use.
func clientForExamples() *Client {
	addr := redisAddr()
	exampleMu.Lock()
	defer exampleMu.Unlock()
	if exampleClient == nil {
		c, err := Dial(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			panic("connecting the examples' Client: " + err.Error())
		}
		exampleClient = c
	}
	return exampleClient
}

// proxiedReplica starts a replica of e's server that replicates through a
// proxy, which can hold the stream back and drop it, and waits until it is
// in sync.
func proxiedReplica(t *testing.T, e *env) (*faultproxy.Proxy, *redistest.Server) {
	t.Helper()
	p, err := faultproxy.New(e.server.Addr)
	if err != nil {
		t.Fatalf("proxy to %s: %v", e.server.Addr, err)
	}
	t.Cleanup(func() { p.Close() })
	host, port, _ := net.SplitHostPort(p.Addr())
	replica := redistest.Standalone(t, "--replicaof", host, port)
	eventually(t, 10*time.Second, func() bool {
		info, err := replica.Do("INFO", "replication")
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, "replica did not sync")
	return p, replica
}
