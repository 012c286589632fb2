package redisson

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync"
)

// The Node.js side of the Redisson interop tests: processes of
// testdata/redisson-node/driver.js, which hold and wait for RLocks with
// node-redisson (Redisson's RLock protocol for Node.js), commanded line by
// line.
//
// node-redisson 1.0.4 differs from Java's Redisson in ways the tests work
// around rather than test: it subscribes after a failed attempt and does
// not attempt again once subscribed (a release in between is missed until
// the holder's lease runs out), so a Node waiter is measured only once
// PUBSUB NUMSUB shows it subscribed; several waiting lock objects of one
// process share one subscription that the first woken drops, so each
// contending Node process holds one lock object; it adds {...} unless the
// name starts with '{' (Java: contains), so the names here have no
// braces; its unlock latch lives 10 ms and its hash field is UUID:UUID;
// it publishes with classic PUBLISH only, so Go publishes classic for it.

const nodeDir = "testdata/redisson-node"

var (
	nodeOnce sync.Once
	nodeErr  error
)

// nodeReady checks that node and npm are installed and that the driver's
// packages are, installing them with npm ci (package-lock.json pins them)
// when they are missing. It fails the test, never skips it.
func nodeReady(t testing.TB) {
	t.Helper()
	nodeOnce.Do(func() {
		for _, bin := range []string{"node", "npm"} {
			if _, err := exec.LookPath(bin); err != nil {
				nodeErr = fmt.Errorf("%s not found in PATH: the Redisson interop tests run node-redisson on Node.js; run `make deps` (it installs nodejs and npm with apt-get and the driver's packages with npm ci)", bin)
				return
			}
		}
		if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "node-redisson", "package.json")); err == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = nodeDir
		if out, err := cmd.CombinedOutput(); err != nil {
			nodeErr = fmt.Errorf("npm ci in %s failed (run `make deps` where the npm registry is reachable): %v\n%s", nodeDir, err, out)
		}
	})
	if nodeErr != nil {
		t.Fatal(nodeErr)
	}
}

// nodeProc is one driver process.
type nodeProc struct {
	t     testing.TB
	cmd   *exec.Cmd
	in    io.WriteCloser
	mu    sync.Mutex
	seq   int
	wait  map[string]chan nodeReply
	exit  chan struct{}
	lines []string // what it printed that is not a reply
}

type nodeReply struct {
	vals []string
	err  error
}

// startNode starts a driver process on the env with Redisson's
// lockWatchdogTimeout watchdog; it is stopped at the end of the test.
func startNode(t testing.TB, e *env, watchdog time.Duration) *nodeProc {
	t.Helper()
	nodeReady(t)
	cmd := exec.Command("node", "driver.js")
	cmd.Dir = nodeDir
	cmd.Env = append(os.Environ(),
		"REDIS_ADDRS="+strings.Join(e.Addrs, ","),
		"LOCK_WATCHDOG_MS="+strconv.FormatInt(watchdog.Milliseconds(), 10))
	if e.Cluster != nil {
		cmd.Env = append(cmd.Env, "REDIS_CLUSTER=1")
	}
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start(), "starting node")
	p := &nodeProc{t: t, cmd: cmd, in: in, wait: make(map[string]chan nodeReply), exit: make(chan struct{})}
	ready := make(chan struct{})
	go p.read(out, ready)
	select {
	case <-ready:
	case <-p.exit:
		t.Fatalf("the node driver exited at start: %s", strings.Join(p.output(), "\n"))
	case <-time.After(30 * time.Second):
		t.Fatalf("the node driver did not start within 30s: %s", strings.Join(p.output(), "\n"))
	}
	t.Cleanup(p.stop)
	return p
}

func (p *nodeProc) read(out io.Reader, ready chan struct{}) {
	defer close(p.exit)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if line == "ready" {
			close(ready)
			continue
		}
		f := strings.Fields(line)
		p.mu.Lock()
		ch, ok := p.wait[first(f)]
		if ok && len(f) >= 2 {
			delete(p.wait, f[0])
		} else {
			p.lines = append(p.lines, line)
		}
		p.mu.Unlock()
		switch {
		case !ok || len(f) < 2:
		case f[1] == "ok":
			ch <- nodeReply{vals: f[2:]}
		default:
			ch <- nodeReply{err: errors.New(strings.Join(f[2:], " "))}
		}
	}
	p.mu.Lock()
	for tag, ch := range p.wait {
		ch <- nodeReply{err: errors.New("the node driver exited")}
		delete(p.wait, tag)
	}
	p.mu.Unlock()
}

func first(f []string) string {
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func (p *nodeProc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

// send sends a command and returns where its reply comes.
func (p *nodeProc) send(args ...string) <-chan nodeReply {
	ch := make(chan nodeReply, 1)
	p.mu.Lock()
	p.seq++
	tag := "t" + strconv.Itoa(p.seq)
	p.wait[tag] = ch
	p.mu.Unlock()
	if _, err := fmt.Fprintln(p.in, tag+" "+strings.Join(args, " ")); err != nil {
		ch <- nodeReply{err: err}
	}
	return ch
}

// await waits for a reply, at most within.
func (p *nodeProc) await(ch <-chan nodeReply, within time.Duration, what string) nodeReply {
	p.t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		p.t.Fatalf("node: %s: no reply within %v; driver output: %s", what, within, strings.Join(p.output(), "\n"))
		return nodeReply{}
	}
}

// do runs a command and requires it to succeed.
func (p *nodeProc) do(args ...string) []string {
	p.t.Helper()
	r := p.await(p.send(args...), time.Minute, strings.Join(args, " "))
	require.NoError(p.t, r.err, "node: %s", strings.Join(args, " "))
	return r.vals
}

func (p *nodeProc) stop() {
	p.in.Close()
	select {
	case <-p.exit:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.exit
	}
	p.cmd.Wait()
}

// micros reads a time the driver printed.
func micros(t testing.TB, s string) time.Time {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return time.UnixMicro(n)
}

// nodeOpts are the options of the Go side of a lock node-redisson shares:
// classic pub/sub, the only kind it speaks.
var nodeOpts = []Option{WithPubSub(PubSubClassic)}

// subscribers counts the subscribers of a channel on the env's masters,
// classic and sharded.
func subscribers(t testing.TB, e *env, channel string) int {
	t.Helper()
	n := 0
	for _, s := range e.Masters() {
		for _, cmd := range []string{"NUMSUB", "SHARDNUMSUB"} {
			out, err := s.Do("PUBSUB", cmd, channel)
			if err != nil {
				continue
			}
			f := strings.Fields(out)
			if len(f) > 0 {
				v, _ := strconv.Atoi(f[len(f)-1])
				n += v
			}
		}
	}
	return n
}

func awaitSubscribers(t testing.TB, e *env, channel string, n int) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool { return subscribers(t, e, channel) >= n },
		"%d subscribers of %s expected", n, channel)
}

// nodeListening waits until a Node waiter listens on channel: subscribed
// on the server (PUBSUB NUMSUB) and its handler attached in the process.
// node-redisson attaches the handler only after the SUBSCRIBE reply, and
// does not attempt again once subscribed, so a message published in
// between is lost and the waiter sleeps until the holder's lease runs
// out; under load that gap reached the message in some runs.
func nodeListening(t testing.TB, e *env, node *nodeProc, channel string) {
	t.Helper()
	awaitSubscribers(t, e, channel, 1)
	eventually(t, 10*time.Second, func() bool {
		n, err := strconv.Atoi(node.do("listening", channel)[0])
		return err == nil && n > 0 && subscribers(t, e, channel) > 0
	}, "the Node waiter listens on %s", channel)
}

func TestRedissonNodeMutualExclusion(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const (
			lease  = 3 * time.Second // bounds what node-redisson's missed messages cost
			rounds = 15
		)
		name := "node-mutex-" + e.Name
		counter, inside := "{"+name+"}:counter", "{"+name+"}:inside"
		rc := e.RueidisClient(t)
		ctx := withTimeout(t, 3*time.Minute)
		nodes := []*nodeProc{startNode(t, e, lease), startNode(t, e, lease), startNode(t, e, lease)}
		clients := e.clients(t, 2, redisync.WithWatchdogLease(lease))

		var wg sync.WaitGroup
		nodeOverlaps := make([]string, len(nodes))
		for i, n := range nodes {
			ch := n.send("count", "L", name, counter, inside, strconv.Itoa(rounds))
			wg.Add(1)
			go func() {
				defer wg.Done()
				select {
				case r := <-ch:
					if r.err != nil {
						t.Errorf("node %d: %v", i, r.err)
						return
					}
					nodeOverlaps[i] = r.vals[0]
				case <-ctx.Done():
					t.Errorf("node %d: %v", i, ctx.Err())
				}
			}()
		}
		var goOverlaps sync.Map
		for i := range 4 {
			rl := clients[i%2].Lock(name, nodeOpts...)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					l, err := rl.Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if n, err := rc.Do(ctx, rc.B().Incr().Key(inside).Build()).AsInt64(); err != nil || n != 1 {
						goOverlaps.Store(time.Now(), n)
					}
					v, _ := rc.Do(ctx, rc.B().Get().Key(counter).Build()).AsInt64()
					time.Sleep(100 * time.Microsecond)
					require.NoError(t, rc.Do(ctx, rc.B().Set().Key(counter).Value(strconv.FormatInt(v+1, 10)).Build()).Error())
					require.NoError(t, rc.Do(ctx, rc.B().Decr().Key(inside).Build()).Error())
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		total, err := rc.Do(ctx, rc.B().Get().Key(counter).Build()).AsInt64()
		require.NoError(t, err)
		goOver := 0
		goOverlaps.Range(func(any, any) bool { goOver++; return true })
		t.Logf("%s: %d increments by 3 Node processes and 4 Go goroutines; overlaps seen by Node %v, by Go %d",
			e.Name, total, nodeOverlaps, goOver)
		require.Equal(t, []string{"0", "0", "0"}, nodeOverlaps, "no Node holder saw another inside")
		require.Zero(t, goOver, "no Go holder saw another inside")
		require.EqualValues(t, (len(nodes)+4)*rounds, total, "no lost update")
	})
}

// percentile is the p-th percentile (0-100) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// wakeStats sums up wake-up times: p50, p99 and max, over n rounds
// (REDISYNC_SOAK=1 runs 200, for a p99 that is not the max).
func wakeStats(ds []time.Duration) string {
	return fmt.Sprintf("p50 %v, p99 %v, max %v (n=%d)", percentile(ds, 50), percentile(ds, 99), slices.Max(ds), len(ds))
}

func TestRedissonNodeWakeUp(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		rounds := soak(20, 200)
		name := "node-wake-" + e.Name
		channel := "redisson_lock__channel:{" + name + "}"
		node := startNode(t, e, 30*time.Second)
		c := e.client(t)
		rl := c.Lock(name, nodeOpts...)
		ctx := withTimeout(t, 5*time.Minute)

		// A Go waiter woken by a Node unlock. The waiter's Unlock is done
		// before the next round's Node lock: a Node lock that found it held
		// could miss its message (see nodeListening).
		var goWakes []time.Duration
		for i := range rounds {
			node.do("lock", "N", name)
			got := make(chan time.Time, 1)
			go func() {
				l, err := rl.Lock(ctx)
				at := time.Now()
				if err != nil {
					t.Error(err)
					close(got)
					return
				}
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
				got <- at
			}()
			awaitGoWaiting(t, c, channel)
			sent := micros(t, node.do("unlock", "N")[0])
			at, ok := <-got
			require.True(t, ok, "round %d", i)
			goWakes = append(goWakes, at.Sub(sent))
			require.Zero(t, redissonWaiters(c, channel), "the Go waiter left its subscription")
		}

		// A Node waiter woken by a Go unlock.
		var nodeWakes []time.Duration
		for i := range rounds {
			l := mustLock(t, ctx, rl.Lock)
			ch := node.send("lock", "N", name)
			nodeListening(t, e, node, channel)
			sent := time.Now()
			require.NoError(t, l.Unlock(ctx))
			r := node.await(ch, 10*time.Second, "lock after a Go unlock")
			require.NoError(t, r.err, "round %d", i)
			nodeWakes = append(nodeWakes, micros(t, r.vals[0]).Sub(sent))
			node.do("unlock", "N")
			eventually(t, 15*time.Second, func() bool { return subscribers(t, e, channel) == 0 }, "the Node waiter's subscription ends")
		}
		t.Logf("%s: Go waiter woken by a Node unlock: %s", e.Name, wakeStats(goWakes))
		t.Logf("%s: Node waiter woken by a Go unlock: %s", e.Name, wakeStats(nodeWakes))
		// Generous bounds: a message wakes in milliseconds; its Client's
		// presence pass would wake the Go waiter half a second later at the
		// median, and a Node waiter that missed the message would wait for
		// the 30 s lease to run out.
		require.Less(t, percentile(goWakes, 50), 250*time.Millisecond, "the Go waiter is woken by the message, not the presence pass")
		require.Less(t, percentile(nodeWakes, 50), 250*time.Millisecond, "the Node waiter is woken by the message")
		require.Less(t, slices.Max(nodeWakes), 5*time.Second, "no Node waiter waits for the lease to run out")
	})
}

func TestRedissonNodeReentrancy(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		name := "node-reentry-" + e.Name
		node := startNode(t, e, 30*time.Second)
		c := e.client(t)
		rl := c.Lock(name, nodeOpts...)
		ctx := withTimeout(t, time.Minute)

		// Node re-enters: two holds in its field; Go waits for both.
		node.do("lock", "N", name)
		node.do("lock", "N", name)
		field := node.do("field", "N", name)[0]
		st, err := rl.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, []Holder{{Owner: field, Holds: 2}}, st.Holders)
		node.do("unlock", "N")
		_, err = rl.TryLock(ctx)
		require.ErrorIs(t, err, redisync.ErrLocked, "Node still holds one hold")
		node.do("unlock", "N")
		l := mustLock(t, ctx, rl.TryLock)

		// Go re-enters: Node waits for both holds.
		inner := mustLock(t, l.Context(), rl.Lock)
		require.Equal(t, "2", node.do("hget", name, ownerOf(l))[0], "Node reads Go's two holds")
		require.Equal(t, "false", node.do("trylock", "N", name)[0])
		require.NoError(t, inner.Unlock(ctx))
		require.Equal(t, "false", node.do("trylock", "N", name)[0], "Go still holds one hold")
		require.NoError(t, l.Unlock(ctx))
		require.Equal(t, "true", node.do("trylock", "N", name)[0])
		node.do("unlock", "N")
	})
}

func TestRedissonNodeWatchdog(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const lease = 1500 * time.Millisecond
		goName, nodeName := "node-watchdog-go-"+e.Name, "node-watchdog-node-"+e.Name
		node := startNode(t, e, lease)
		c := e.client(t, redisync.WithWatchdogLease(lease))
		ctx := withTimeout(t, time.Minute)

		gl := mustLock(t, ctx, c.Lock(goName, nodeOpts...).Lock)
		node.do("lock", "N", nodeName)
		field := node.do("field", "N", nodeName)[0]
		time.Sleep(3 * lease)

		// Node sees the Go holder's lease renewed: still held by its field,
		// with a TTL, and not to be taken.
		require.Equal(t, "1", node.do("hget", goName, ownerOf(gl))[0])
		pttl, err := strconv.Atoi(node.do("pttl", goName)[0])
		require.NoError(t, err)
		require.Positive(t, pttl)
		require.Equal(t, "false", node.do("trylock", "M", goName)[0])
		require.NoError(t, gl.Err())

		// Go sees Node's renewed.
		st, err := c.Lock(nodeName).Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, []Holder{{Owner: field, Holds: 1}}, st.Holders)
		require.Positive(t, st.TTL)
		_, err = c.Lock(nodeName).TryLock(ctx)
		require.ErrorIs(t, err, redisync.ErrLocked)

		require.NoError(t, gl.Unlock(ctx))
		node.do("unlock", "N")
	})
}

func TestRedissonNodeForceUnlock(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		goName, nodeName := "node-force-go-"+e.Name, "node-force-node-"+e.Name
		node := startNode(t, e, 30*time.Second)
		c := e.client(t)
		ctx := withTimeout(t, time.Minute)

		// Node force-unlocks the Go holder's lock: the redisync.Lease reports it lost.
		rl := c.Lock(goName, nodeOpts...)
		gl := mustLock(t, ctx, rl.Lock)
		require.Equal(t, "true", node.do("force", "F", goName)[0])
		select {
		case <-gl.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("the Go holder did not see its lock force-unlocked")
		}
		require.ErrorIs(t, gl.Err(), redisync.ErrExpired)
		require.ErrorIs(t, gl.Unlock(ctx), redisync.ErrNotHeld)

		// Its message wakes a Go waiter, which takes the lock: the holder
		// then reports it expired or taken over, whichever it sees first.
		gl = mustLock(t, ctx, rl.Lock)
		waiting := e.client(t).Lock(goName, nodeOpts...).Acquire(ctx)
		awaitSubscribers(t, e, "redisson_lock__channel:{"+goName+"}", 1)
		require.Equal(t, "true", node.do("force", "F", goName)[0])
		wl := recv(t, waiting, 5*time.Second, "the Go waiter after a forced unlock")
		select {
		case <-gl.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("the Go holder did not see its lock force-unlocked")
		}
		require.True(t, errors.Is(gl.Err(), redisync.ErrExpired) || errors.Is(gl.Err(), redisync.ErrTakenOver), "%v", gl.Err())
		require.NoError(t, wl.Unlock(ctx))

		// Go force-unlocks Node's lock: Node's unlock then finds it not held.
		node.do("lock", "N", nodeName)
		found, err := c.Lock(nodeName, nodeOpts...).ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, found)
		r := node.await(node.send("unlock", "N"), 10*time.Second, "unlock after a forced unlock")
		require.ErrorContains(t, r.err, "not locked by current client")
		st, err := c.Lock(nodeName).Inspect(ctx)
		require.NoError(t, err)
		require.False(t, st.Locked)
	})
}

func TestRedissonNodeUnlockLatch(t *testing.T) {
	e := standaloneEnv(t)
	name := "node-latch"
	node := startNode(t, e, 30*time.Second)
	ctx := withTimeout(t, time.Minute)

	// node-redisson's unlock, like Java's, leaves no latch once answered.
	node.do("lock", "N", name)
	node.do("lock", "N", name)
	node.do("unlock", "N")
	node.do("unlock", "N")
	require.Empty(t, e.Keys(t, "redisson_unlock_latch:{"+name+"}:*"))

	// A Go Unlock whose reply is lost, retried: the latch answers the retry
	// with the first result, as Redisson's does. The lock is re-entered, so
	// that a second release would free it.
	own := ownServer(t)
	a, p := own.proxied(t)
	b := own.client(t)
	rl := a.Lock(name, nodeOpts...)
	warm := mustLock(t, ctx, rl.Lock)
	require.NoError(t, warm.Unlock(ctx))
	outer := mustLock(t, ctx, rl.Lock)
	inner := mustLock(t, outer.Context(), rl.Lock)
	mid := mustLock(t, outer.Context(), rl.Lock)
	// The release's reply comes 3 s after it is sent, far after short ends.
	p.SetLatency(1500 * time.Millisecond)
	short, cancel := context.WithCancel(ctx)
	stop := time.AfterFunc(100*time.Millisecond, cancel)
	err := inner.Unlock(short)
	stop.Stop()
	cancel()
	require.ErrorIs(t, err, context.Canceled, "the reply is late")
	orc := own.RueidisClient(t)
	eventually(t, 5*time.Second, func() bool {
		n, _ := orc.Do(ctx, orc.B().Hget().Key(name).Field(ownerOf(outer)).Build()).AsInt64()
		return n == 2
	}, "the first release reaches Redis")
	latches := own.Keys(t, "redisson_unlock_latch:{"+name+"}:*")
	require.Len(t, latches, 1, "the unanswered release left its latch")
	v, err := orc.Do(ctx, orc.B().Get().Key(latches[0]).Build()).ToString()
	require.NoError(t, err)
	require.Equal(t, "0", v, "the latch keeps the result: still held")
	ttl, err := orc.Do(ctx, orc.B().Pttl().Key(latches[0]).Build()).AsInt64()
	require.NoError(t, err)
	require.Greater(t, ttl, int64(15000), "the latch lives as Redisson's, about 20 s")
	p.SetLatency(0)
	require.NoError(t, inner.Unlock(ctx), "the retry gets the first result")
	n, err := orc.Do(ctx, orc.B().Hget().Key(name).Field(ownerOf(outer)).Build()).AsInt64()
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the retry did not release a second hold")
	require.Empty(t, own.Keys(t, "redisson_unlock_latch:{"+name+"}:*"), "the answered retry drops the latch")
	_, err = b.Lock(name).TryLock(ctx)
	require.ErrorIs(t, err, redisync.ErrLocked)
	require.NoError(t, mid.Unlock(ctx))
	require.NoError(t, outer.Unlock(ctx))
	mustLock(t, ctx, b.Lock(name).TryLock).Unlock(ctx)
}
