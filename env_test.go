package redisync

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

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

// client returns a Client on its own connection; closed at the end of the test.
func (e *env) client(t testing.TB, opts ...Option) *Client {
	t.Helper()
	rc := e.rueidisClient(t)
	c, err := New(rc, append([]Option{WithLogger(quietLogger())}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// keys lists the keys matching pattern on every master of the env.
func (e *env) keys(t testing.TB, pattern string) []string {
	t.Helper()
	var servers []*redistest.Server
	if e.cluster != nil {
		servers = e.cluster.Masters
	} else {
		servers = []*redistest.Server{e.server}
	}
	var out []string
	for _, s := range servers {
		r, err := s.Do("KEYS", pattern)
		if err != nil {
			t.Fatalf("KEYS: %v", err)
		}
		for _, k := range strings.Split(r, "\n") {
			if k != "" {
				out = append(out, k)
			}
		}
	}
	return out
}

// channels lists the pub/sub channels (classic and sharded) with
// subscribers on every master of the env.
func (e *env) channels(t testing.TB) []string {
	t.Helper()
	var servers []*redistest.Server
	if e.cluster != nil {
		servers = e.cluster.Masters
	} else {
		servers = []*redistest.Server{e.server}
	}
	var out []string
	for _, s := range servers {
		for _, cmd := range []string{"CHANNELS", "SHARDCHANNELS"} {
			r, err := s.Do("PUBSUB", cmd)
			if err != nil {
				t.Fatalf("PUBSUB %s: %v", cmd, err)
			}
			for _, k := range strings.Split(r, "\n") {
				if k != "" {
					out = append(out, k)
				}
			}
		}
	}
	return out
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
