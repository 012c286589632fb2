package redisson

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/internal/engine"
	"github.com/redisync/redisync/internal/faultproxy"
	"github.com/redisync/redisync/internal/testenv"
)

// The tests of this package run on the deployments of package testenv, as
// the root's do; their Clients are Redisson clients over redisync Clients.

func TestMain(m *testing.M) { testenv.Main(m, closeExampleClient) }

// env is one Redis deployment the tests run against.
type env struct{ *testenv.Env }

func wrapEnv(te *testenv.Env) *env { return &env{te} }

// eachEnv runs f against standalone Redis and the 3-master Cluster.
func eachEnv(t *testing.T, f func(t *testing.T, e *env)) { testenv.Each(t, wrapEnv, f) }

// standaloneEnv is the standalone server the tests share.
func standaloneEnv(t testing.TB) *env { return wrapEnv(testenv.Standalone(t)) }

// ownServer is a standalone server of the test's own.
func ownServer(t testing.TB, args ...string) *env { return wrapEnv(testenv.OwnServer(t, args...)) }

// The helpers of package testenv.
var (
	withTimeout = testenv.WithTimeout
	eventually  = testenv.Eventually
	soak        = testenv.Soak
	below       = testenv.Below
	testSeed    = testenv.Seed
)

// client returns the Redisson client of a redisync Client of the env that
// owns its connection (Dial: LossDetection DetectOnChange), with quiet
// logs; closed at the end of the test unless closed before.
func (e *env) client(t testing.TB, opts ...redisync.Option) *Client {
	t.Helper()
	c, err := redisync.Dial(rueidis.ClientOption{InitAddress: e.Addrs}, append([]redisync.Option{redisync.WithLogger(testenv.QuietLogger())}, opts...)...)
	if err != nil {
		t.Fatalf("connecting to %s redis at %v: %v", e.Name, e.Addrs, err)
	}
	t.Cleanup(func() { c.Close() })
	return New(c)
}

// renewalClient is client over a rueidis.Client of the test's (New:
// LossDetection DetectOnRenewal).
func (e *env) renewalClient(t testing.TB, opts ...redisync.Option) *Client {
	t.Helper()
	c, err := redisync.New(e.RueidisClient(t), append([]redisync.Option{redisync.WithLogger(testenv.QuietLogger())}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return New(c)
}

// clients returns n Clients of the env (see client).
func (e *env) clients(t testing.TB, n int, opts ...redisync.Option) []*Client {
	t.Helper()
	cs := make([]*Client, n)
	for i := range cs {
		cs[i] = e.client(t, opts...)
	}
	return cs
}

// faultyClient returns the Redisson client of a redisync Client made with
// New (and DetectChanges) over the env's rueidis client wrapped in
// testenv.ReplyFaults, and the wrapper; closed at the end of the test.
func (e *env) faultyClient(t testing.TB, opts ...redisync.Option) (*Client, *testenv.ReplyFaults) {
	t.Helper()
	opt := rueidis.ClientOption{InitAddress: e.Addrs}
	base := []redisync.Option{redisync.WithLogger(testenv.QuietLogger()), redisync.DetectChanges(&opt)}
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("connecting to %s redis at %v: %v", e.Name, e.Addrs, err)
	}
	rf := testenv.WithReplyFaults(rc)
	c, err := redisync.New(rf, append(base, opts...)...)
	if err != nil {
		rc.Close()
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		rf.Clear()
		c.Close()
		rc.Close()
	})
	return New(c), rf
}

// Close closes the redisync Client c was made of (for the tests).
func (c *Client) Close() error { return c.parent.Close() }

// ID is the ID of the redisync Client c was made of (for the tests).
func (c *Client) ID() string { return c.parent.ID() }

// runs matches the calls of script s.
func runs(s engine.Script) func(cmd []string) bool { return testenv.Runs(s.SHA, s.Src) }

// runsWith matches the calls of script s one of whose keys or arguments is
// arg.
func runsWith(s engine.Script, arg string) func(cmd []string) bool {
	return testenv.RunsWith(runs(s), arg)
}

// ownerOf is the owner (UUID:THREADID field) of l's ownership.
func ownerOf(l *redisync.Lease) string {
	info, _ := leaseInfo(l)
	return info.Owner
}

// mustLock takes a lease with lock and fails the test if it cannot.
func mustLock(t testing.TB, ctx context.Context, lock func(context.Context) (*redisync.Lease, error)) *redisync.Lease {
	t.Helper()
	return testenv.MustLock(t, ctx, lock)
}

// recv waits for the Lease an Acquire delivers, at most within, and
// requires it to hold.
func recv(t testing.TB, ch <-chan *redisync.Lease, within time.Duration, what string) *redisync.Lease {
	t.Helper()
	return testenv.Recv(t, ch, within, what)
}

// delivered waits for the one Lease an Acquire delivers, failed or not.
func delivered(t testing.TB, ch <-chan *redisync.Lease) *redisync.Lease {
	t.Helper()
	return testenv.Delivered(t, ch)
}

// leakCheck notes the goroutines running now; the function it returns
// closes clients and checks that no goroutine started since is left.
func leakCheck(t *testing.T) func(clients []*Client, extra ...goleak.Option) {
	return testenv.LeakCheck[*Client](t)
}

// onClients returns n handles that handle makes, each on a Client of the
// env of its own (see client).
func onClients[H any](t testing.TB, e *env, n int, handle func(*Client) H) []H {
	t.Helper()
	return testenv.Map(e.clients(t, n), handle)
}

// transient reports whether an acquisition error is one a wait retries: a
// connection error, not a reply of Redis nor one of the library's refusals.
func transient(err error) bool {
	var re *rueidis.RedisError
	return !errors.As(err, &re) && !errors.Is(err, redisync.ErrClosed) &&
		!errors.Is(err, redisync.ErrNotHeld) && !errors.Is(err, redisync.ErrInvalidArgument)
}

// proxied returns a Client whose connection to the env's standalone server
// goes through a fault proxy, and the proxy (see testenv.Env.Proxy).
func (e *env) proxied(t testing.TB, opts ...redisync.Option) (*Client, *faultproxy.Proxy) {
	t.Helper()
	p, opt := e.Proxy(t)
	c, err := redisync.Dial(opt, append([]redisync.Option{redisync.WithLogger(testenv.QuietLogger())}, opts...)...)
	if err != nil {
		t.Fatalf("dialing %v: %v", opt.InitAddress, err)
	}
	t.Cleanup(func() { c.Close() })
	t.Cleanup(p.Heal)
	return New(c), p
}
