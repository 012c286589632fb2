package redisync

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync/internal/engine"
	"github.com/redisync/redisync/internal/redistest"
)

// The benchmarks run against one standalone redis-server on loopback. Read
// their times in units of BenchmarkPing, the round trip every command pays.
//
// Command counts come from INFO commandstats, taken before and after the
// timed loop:
//
//   - cmds/op: commands the clients sent (EVALSHA, EVAL, SSUBSCRIBE,
//     SUNSUBSCRIBE, PING, ...), that is round trips and pub/sub traffic.
//   - allcmds/op: every command the server executed, including those the Lua
//     scripts run inside EVALSHA (commandstats counts them as well).
//   - srv-µs/op: the server's CPU time (INFO cpu); script-µs/op: its time
//     inside EVALSHA and EVAL, the commands the scripts call included.
//
// The commands the benchmarks send to observe the server (INFO, PUBSUB) are
// left out of both.

// BenchmarkPing measures the PING round trip through a rueidis client.
func BenchmarkPing(b *testing.B) {
	e := standaloneEnv(b)
	rc := e.rueidisClient(b)
	ctx := context.Background()
	ping := rc.B().Ping().Build().Pin()
	if err := rc.Do(ctx, ping).Error(); err != nil {
		b.Fatalf("PING: %v", err)
	}
	before := commandCalls(b, e.server)
	b.ResetTimer()
	for range b.N {
		if err := rc.Do(ctx, ping).Error(); err != nil {
			b.Fatalf("PING: %v", err)
		}
	}
	b.StopTimer()
	d := commandDelta(b, before, commandCalls(b, e.server))
	reportCommands(b, d, b.N, "op")
}

// BenchmarkMutexUncontended measures Lock+Unlock of a free lock: every
// goroutine has a key of its own, all share one Client.
func BenchmarkMutexUncontended(b *testing.B) {
	benchMutexUncontended(b, "bench:uncontended:", false)
}

// BenchmarkMutexUncontendedDeadline is BenchmarkMutexUncontended with a
// context that has a deadline on every call, as callers usually give (and
// bench/peers does): the calls that may take a lock then keep their outcome
// known past the context's end.
func BenchmarkMutexUncontendedDeadline(b *testing.B) {
	benchMutexUncontended(b, "bench:deadline:", true)
}

func benchMutexUncontended(b *testing.B, prefix string, deadline bool) {
	e := standaloneEnv(b)
	c := e.client(b)
	// Loads the scripts, starts the watchdog.
	benchLockUnlock(b, c.Mutex(prefix+"warm-up").Lock)
	benchParallelCycles(b, e, deadline, func(id string) func(ctx context.Context, n int) error {
		m := c.Mutex(prefix + id)
		return func(ctx context.Context, _ int) error {
			l, err := m.Lock(ctx)
			if err != nil {
				return fmt.Errorf("Lock: %w", err)
			}
			if err := l.Unlock(ctx); err != nil {
				return fmt.Errorf("Unlock: %w", err)
			}
			return nil
		}
	})
}

// compareAndDelete is the floor's release: the key deleted if it still
// holds the caller's token.
var compareAndDelete = rueidis.NewLuaScript("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0")

// BenchmarkFloorUncontendedDeadline is BenchmarkMutexUncontendedDeadline's
// cycle done the least a Redis lock can do it, for comparison: SET NX PX,
// then a compare-and-delete script, on a rueidis client of its own (with
// client-side caching, as a Client made by Dial has), with the same
// deadline on every cycle.
func BenchmarkFloorUncontendedDeadline(b *testing.B) {
	e := standaloneEnv(b)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: e.addrs})
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	cycle := func(ctx context.Context, key, token string) error {
		if err := rc.Do(ctx, rc.B().Set().Key(key).Value(token).Nx().Px(10*time.Second).Build()).Error(); err != nil {
			return err
		}
		return compareAndDelete.Exec(ctx, rc, []string{key}, []string{token}).Error()
	}
	if err := cycle(context.Background(), "bench:floor:warm-up", "t"); err != nil {
		b.Fatal(err)
	}
	benchParallelCycles(b, e, true, func(id string) func(ctx context.Context, n int) error {
		key := "bench:floor:" + id
		return func(ctx context.Context, n int) error { return cycle(ctx, key, id+":"+strconv.Itoa(n)) }
	})
}

// benchParallelCycles runs cycles on 32 goroutines (two CPUs, as bench/peers
// A): each gets its cycle from worker, given an id of its own, and runs it
// with its number, under a context with a 10 s deadline when deadline is
// set. It reports the commands per cycle.
func benchParallelCycles(b *testing.B, e *env, deadline bool, worker func(id string) func(ctx context.Context, n int) error) {
	var ids atomic.Int64
	before := commandCalls(b, e.server)
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		cycle := worker(strconv.FormatInt(ids.Add(1), 10))
		for n := 0; pb.Next(); n++ {
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if deadline {
				ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
			}
			err := cycle(ctx, n)
			cancel()
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if b.Failed() {
		return
	}
	d := commandDelta(b, before, commandCalls(b, e.server))
	reportCommands(b, d, b.N, "op")
}

// BenchmarkScripts measures the server's side of an uncontended cycle, one
// call after the other on one connection: redisync's acquire and release
// scripts on a free Mutex lock, against scripts of the same shape that do
// less. script-µs/op is the time the server spent in the cycle's scripts
// (EVALSHA's usec, inner commands included):
//   - redisync: acquire.lua and release.lua, as Lock and Unlock run them;
//   - bare: two scripts that only run the inner commands of those two
//     (HMGET, HSET and PEXPIRE of the lock's hash), with the same keys and
//     arguments;
//   - string: the common cases of those two scripts on a lock of one
//     string key whose value holds the hash's fields (owner, holds, token,
//     counter, queue flag, the release that freed it): GET, then SET PX
//     in each, with the same keys and arguments;
//   - fenced-floor: a script of SET NX PX and INCR (the token), then a
//     compare-and-delete script;
//   - floor: SET NX PX, not a script, then the compare-and-delete script;
//   - empty: two scripts that return at once, with the same keys and
//     arguments as redisync's.
func BenchmarkScripts(b *testing.B) {
	e := standaloneEnv(b)
	rc := e.rueidisClient(b)
	c := e.client(b)
	ctx := context.Background()
	m := c.Mutex("bench:scripts")
	// The arguments Lock and Unlock send, for an owner with one hold.
	w := m.q.wordsOf()
	lockKeys := w.keys
	acquiring := func(owner string) []string {
		return acquireArgs(owner, "#1", w.lease, owner, m.cfg.waiterExpiry, "first", w.short, nil)
	}
	releasing := func(owner string) []string { return c.releaseExec(m.keys, owner, "#1").Args }
	bare := rueidis.NewLuaScript(`local v = redis.call('HMGET', KEYS[1], 'owner', 'holds', 'token', 't', 'q')
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'holds', ARGV[2], 'token', '1')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, '1', 1, 0}`)
	stringAcquire := rueidis.NewLuaScript(`local v = redis.call('GET', KEYS[1])
local owner, holds, token, t, q = '', '', '0', '', ''
if v then
  owner, holds, token, t, q = string.match(v, '^(.-)|(.-)|(%d+)|(%d*)|(%d?)|')
end
if owner ~= '' then
  return {0, redis.call('PTTL', KEYS[1]), 1, token}
end
token = string.format('%d', math.max(tonumber(token), tonumber(t) or 0) + 1)
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[2] .. '|' .. token .. '||' .. q .. '|', 'PX', ARGV[3])
return {1, token, 1, 0}`)
	stringRelease := rueidis.NewLuaScript(`local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local owner, holds, token, t, q = string.match(v, '^(.-)|(.-)|(%d+)|(%d*)|(%d?)|')
if owner == ARGV[1] and holds == ARGV[2] and q ~= '1' then
  redis.call('SET', KEYS[1], '||' .. token .. '|' .. t .. '||' .. ARGV[1] .. ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0`)
	empty := rueidis.NewLuaScript("return 1")
	fenced := rueidis.NewLuaScript("redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', 30000) return redis.call('INCR', KEYS[2])")
	floorKeys := []string{"{bench:scripts}:floor", "{bench:scripts}:token"}
	stringKeys := append([]string{"{bench:scripts}:string"}, lockKeys[1:]...)
	for _, bc := range []struct {
		name  string
		cycle func(owner string) error
	}{
		{"redisync", func(owner string) error {
			if err := acquireScript.exec(ctx, rc, lockKeys, acquiring(owner)).Error(); err != nil {
				return err
			}
			return releaseScript.exec(ctx, rc, lockKeys, releasing(owner)).Error()
		}},
		{"bare", func(owner string) error {
			if err := bare.Exec(ctx, rc, lockKeys, acquiring(owner)).Error(); err != nil {
				return err
			}
			return bare.Exec(ctx, rc, lockKeys, releasing(owner)).Error()
		}},
		{"string", func(owner string) error {
			res, err := stringAcquire.Exec(ctx, rc, stringKeys, acquiring(owner)).ToArray()
			if err != nil {
				return err
			}
			if took, _ := res[0].AsInt64(); took != 1 {
				return fmt.Errorf("string layout: the lock was not free: %v", res)
			}
			if freed, err := stringRelease.Exec(ctx, rc, stringKeys, releasing(owner)).AsInt64(); err != nil || freed != 1 {
				return fmt.Errorf("string layout: not released (%d, %v)", freed, err)
			}
			return nil
		}},
		{"fenced-floor", func(owner string) error {
			if err := fenced.Exec(ctx, rc, floorKeys, []string{owner}).Error(); err != nil {
				return err
			}
			return compareAndDelete.Exec(ctx, rc, floorKeys[:1], []string{owner}).Error()
		}},
		{"floor", func(owner string) error {
			if err := rc.Do(ctx, rc.B().Set().Key(floorKeys[0]).Value(owner).Nx().Px(30*time.Second).Build()).Error(); err != nil {
				return err
			}
			return compareAndDelete.Exec(ctx, rc, floorKeys[:1], []string{owner}).Error()
		}},
		{"empty", func(owner string) error {
			if err := empty.Exec(ctx, rc, lockKeys, acquiring(owner)).Error(); err != nil {
				return err
			}
			return empty.Exec(ctx, rc, lockKeys, releasing(owner)).Error()
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if err := bc.cycle("warm-up"); err != nil { // loads the scripts
				b.Fatal(err)
			}
			before := commandCalls(b, e.server)
			b.ResetTimer()
			for n := range b.N {
				if err := bc.cycle("o:" + strconv.Itoa(n)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportCommands(b, commandDelta(b, before, commandCalls(b, e.server)), b.N, "op")
		})
	}
}

// BenchmarkHandOffRelease measures the server's side of a hand-off: the
// release script run on a Mutex lock that one Client holds and another's
// waiter waits for, so that the release hands the lock to it, with the
// keys restored before each run (RESTORE, sent apart). script-µs/op is the
// time the server spent in the script (EVALSHA's or FCALL's usec, inner
// commands included):
//   - release: release.lua, as Unlock runs it;
//   - function: the same code as a Redis function (FUNCTION LOAD once,
//     then FCALL): the preludes' functions are defined at the load, not at
//     every call;
//   - commands: a script of the commands the release runs here (HMGET,
//     ZPOPMIN, TIME, HMGET, DEL, HSET, PEXPIRE, SPUBLISH), on the same
//     keys, without its logic;
//   - definitions: the release's preludes (lock.lua, prelude.lua,
//     lock_queue.lua), which define its functions, and nothing after;
//   - publish: a script that only publishes a message;
//   - empty: a script that returns at once;
//
// all with the same keys and arguments,
// each one right after the restore (warm) and after an idle as long as a
// holder's in bench/peers C (idle: 10 ms), which is when a hand-off's
// release runs. ns/op counts the restore, and the idle.
func BenchmarkHandOffRelease(b *testing.B) {
	e := standaloneEnv(b)
	rc := e.rueidisClient(b)
	ctx := context.Background()
	holder, waiter := e.client(b), e.client(b)
	name := "bench:handoff-release"
	l, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		b.Fatal(err)
	}
	m := waiter.Mutex(name)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, _ = m.Lock(wctx) }()
	keys := []string{m.keys.lock, m.keys.queue, m.keys.waiters}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := rc.Do(ctx, rc.B().Zcard().Key(m.keys.queue).Build()).AsInt64()
		if err != nil {
			b.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the waiter did not queue")
		}
		time.Sleep(5 * time.Millisecond)
	}
	dumps := make([]string, len(keys))
	for i, k := range keys {
		if dumps[i], err = rc.Do(ctx, rc.B().Dump().Key(k).Build()).ToString(); err != nil {
			b.Fatal(k, err)
		}
	}
	args := holder.releaseExec(m.keys, l.h.owner, l.hold).Args
	// Neither Client acts on the keys from here on: the waiter gives up,
	// and both close.
	cancel()
	holder.Close()
	waiter.Close()
	restore := func(b *testing.B) {
		for i, k := range keys {
			if err := rc.Do(ctx, rc.B().Restore().Key(k).Ttl(0).SerializedValue(dumps[i]).Replace().Build()).Error(); err != nil {
				b.Fatal(err)
			}
		}
	}
	// Restored without an expiry: deleted at the end.
	b.Cleanup(func() { rc.Do(context.Background(), rc.B().Del().Key(keys...).Build()) })
	lib := "#!lua name=redisync_bench\n" + engine.Source(luaFiles, "lua", "lock", "prelude", "lock_queue") +
		"redis.register_function('redisync_bench_release', function(KEYS, ARGV)\n" +
		engine.Source(luaFiles, "lua", "release_last", "release") + "end)\n"
	if err := rc.Do(ctx, rc.B().FunctionLoad().Replace().FunctionCode(lib).Build()).Error(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rc.Do(context.Background(), rc.B().FunctionDelete().LibraryName("redisync_bench").Build()) })
	commands := rueidis.NewLuaScript(`redis.call('HMGET', KEYS[1], 'owner', 'holds', 'token', 't', 'q')
redis.call('ZPOPMIN', KEYS[2])
redis.call('TIME')
redis.call('HMGET', KEYS[3], 'c', 'w', 'n')
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[1], 'owner', 'o', 'holds', '#1', 'token', '2', 'r', 'r', 'q', '')
redis.call('PEXPIRE', KEYS[1], 30000)
redis.pcall('SPUBLISH', ARGV[4] .. ':c', 'g:c:1 2 3')
return 1`)
	definitions := rueidis.NewLuaScript(engine.Source(luaFiles, "lua", "lock", "prelude", "lock_queue") + "return 1")
	publish := rueidis.NewLuaScript(`redis.pcall('SPUBLISH', ARGV[4] .. ':c', 'g:c:1 2 3') return 1`)
	empty := rueidis.NewLuaScript("return 1")
	handedOver := func(n int64, err error) error {
		if err == nil && n != 1 {
			err = fmt.Errorf("the release answered %d, not 1: no hand-over", n)
		}
		return err
	}
	for _, bc := range []struct {
		name string
		run  func() error
	}{
		{"release", func() error { return handedOver(releaseScript.exec(ctx, rc, keys, args).AsInt64()) }},
		{"function", func() error {
			return handedOver(rc.Do(ctx, rc.B().Fcall().Function("redisync_bench_release").Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()).AsInt64())
		}},
		{"commands", func() error { return commands.Exec(ctx, rc, keys, args).Error() }},
		{"definitions", func() error { return definitions.Exec(ctx, rc, keys, args).Error() }},
		{"publish", func() error { return publish.Exec(ctx, rc, keys, args).Error() }},
		{"empty", func() error { return empty.Exec(ctx, rc, keys, args).Error() }},
	} {
		for _, idle := range []time.Duration{0, 10 * time.Millisecond} {
			label := bc.name + "/warm"
			if idle > 0 {
				label = bc.name + "/idle"
			}
			b.Run(label, func(b *testing.B) {
				restore(b)
				if err := bc.run(); err != nil { // loads the script
					b.Fatal(err)
				}
				before := commandCalls(b, e.server)
				b.ResetTimer()
				for range b.N {
					restore(b)
					time.Sleep(idle)
					if err := bc.run(); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				reportCommands(b, commandDelta(b, before, commandCalls(b, e.server)), b.N, "op")
			})
		}
	}
}

// BenchmarkMutexSerial measures one goroutine's Lock+Unlock cycles one
// after the other, each with a deadline: the latency of an uncontended
// cycle (two round trips at least).
func BenchmarkMutexSerial(b *testing.B) {
	e := standaloneEnv(b)
	c := e.client(b)
	m := c.Mutex("bench:serial")
	benchLockUnlock(b, m.Lock)
	before := commandCalls(b, e.server)
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ok := benchCycle(b, ctx, m.Lock)
		cancel()
		if !ok {
			return
		}
	}
	b.StopTimer()
	d := commandDelta(b, before, commandCalls(b, e.server))
	reportCommands(b, d, b.N, "op")
}

// benchCycle takes a lease with lock and releases it; it reports a failure
// and returns false when either fails.
func benchCycle(tb testing.TB, ctx context.Context, lock func(context.Context) (*Lease, error)) bool {
	l, err := lock(ctx)
	if err != nil {
		tb.Errorf("Lock: %v", err)
		return false
	}
	if err := l.Unlock(ctx); err != nil {
		tb.Errorf("Unlock: %v", err)
		return false
	}
	return true
}

// BenchmarkMutexContended measures Lock+Unlock of one lock that goroutines
// on four Clients (four connections) fight for. ns/op is the time per
// acquisition; attempts/op is the scripts other than releases per
// acquisition: acquire attempts (a waiter's first, and its look once
// subscribed) and the renewal of a lease handed over, when it is held a
// third into its short lease.
func BenchmarkMutexContended(b *testing.B) {
	const clients = 4
	e := standaloneEnv(b)
	ctx := context.Background()
	const name = "bench:contended"
	ms := onClients(b, e, clients, func(c *Client) *Mutex { return c.Mutex(name) })
	for _, m := range ms {
		benchLockUnlock(b, m.Lock)
	}
	channel := ms[0].keys.channel
	benchWaitUnsubscribed(b, e, channel)

	var inside, overlaps atomic.Int64
	before := commandCalls(b, e.server)
	b.ResetTimer()
	runOnHandles(b, ms, 2, func(pb *testing.PB, _ int, m *Mutex) {
		for pb.Next() {
			l, err := m.Lock(ctx)
			if err != nil {
				b.Errorf("Lock: %v", err)
				return
			}
			if inside.Add(1) != 1 {
				overlaps.Add(1)
			}
			inside.Add(-1)
			if err := l.Unlock(ctx); err != nil {
				b.Errorf("Unlock: %v", err)
				return
			}
		}
	})
	b.StopTimer()
	if n := overlaps.Load(); n > 0 {
		b.Fatalf("mutual exclusion violated: %d acquisitions found the lock held by another lease", n)
	}
	if b.Failed() {
		return
	}
	// The last waiters drop their subscriptions in the background.
	benchWaitUnsubscribed(b, e, channel)
	d := commandDelta(b, before, commandCalls(b, e.server))
	reportCommands(b, d, b.N, "op")
	scripts := d.calls["evalsha"] + d.calls["eval"]
	b.ReportMetric(float64(scripts-int64(b.N))/float64(b.N), "attempts/op")
}

// BenchmarkMutexHandOff measures how long a lock takes to pass from its
// holder to a waiter on another Client: from just before the holder's
// Unlock until the waiter's Lock returns. The waiter is blocked when the
// release comes: it has subscribed to the lock's channel and found the lock
// held after the subscription took effect. The two Clients swap roles at
// every iteration.
//
// ns/op is the mean hand-off latency; p50-µs and p99-µs its percentiles,
// p50/ping the median in PING round trips (ping-µs, the median of PINGs
// sent before the loop). cmds/handoff counts the holder's release, which
// hands the lock over, and the waiter's whole way: first attempt,
// SSUBSCRIBE, attempt once subscribed, the renewal of the lease handed over,
// SUNSUBSCRIBE and the PING rueidis writes after every unsubscribe command
// (7 in all).
func BenchmarkMutexHandOff(b *testing.B) {
	e := standaloneEnv(b)
	ctx := context.Background()
	probe := e.rueidisClient(b)
	const name = "bench:handoff"
	ms := [2]*Mutex{e.client(b).Mutex(name), e.client(b).Mutex(name)}
	channel := ms[0].keys.channel

	held, err := ms[0].Lock(ctx)
	if err != nil {
		b.Fatalf("Lock: %v", err)
	}
	// One hand-off each way, untimed.
	held, _ = benchHandOff(b, probe, held, ms[1])
	held, _ = benchHandOff(b, probe, held, ms[0])
	benchWaitUnsubscribed(b, e, channel)
	ping := benchPingRoundTrip(b, probe, 1000)

	latencies := make([]time.Duration, 0, b.N)
	before := commandCalls(b, e.server)
	b.StopTimer() // benchHandOff times each hand-off
	b.ResetTimer()
	for i := range b.N {
		var lat time.Duration
		held, lat = benchHandOff(b, probe, held, ms[(i+1)%2])
		latencies = append(latencies, lat)
	}
	// The last waiter drops its subscription in the background.
	benchWaitUnsubscribed(b, e, channel)
	d := commandDelta(b, before, commandCalls(b, e.server))
	if err := held.Unlock(ctx); err != nil {
		b.Fatalf("Unlock: %v", err)
	}

	slices.Sort(latencies)
	p50, p99 := benchPercentile(latencies, 50), benchPercentile(latencies, 99)
	b.ReportMetric(float64(p50)/float64(time.Microsecond), "p50-µs")
	b.ReportMetric(float64(p99)/float64(time.Microsecond), "p99-µs")
	b.ReportMetric(float64(ping)/float64(time.Microsecond), "ping-µs")
	b.ReportMetric(float64(p50)/float64(ping), "p50/ping")
	reportCommands(b, d, b.N, "handoff")
}

// benchHandOff starts a Lock of to while held is held, waits until the
// waiter is blocked, and releases held. It returns the waiter's lease and
// the time from the release to the waiter's Lock returning, the only part
// of it the benchmark timer runs for.
func benchHandOff(b *testing.B, probe rueidis.Client, held *Lease, to *Mutex) (*Lease, time.Duration) {
	b.Helper()
	type result struct {
		l   *Lease
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		l, err := to.Lock(context.Background())
		done <- result{l, err, time.Now()}
	}()
	// The waiter has a place in the queue and expects its message on a live
	// subscription (its Client's lingering one, joined before its attempt,
	// or a new one once confirmed): it is blocked, or about to block with
	// the wake-up kept for it.
	deadline := time.Now().Add(10 * time.Second)
	queued := func() bool {
		n, err := probe.Do(context.Background(), probe.B().Zcard().Key(to.keys.queue).Build()).AsInt64()
		return err == nil && n > 0
	}
	for !benchExpecting(to) || !queued() {
		if time.Now().After(deadline) {
			b.Fatal("the waiter did not reach its wait")
		}
		select {
		case r := <-done:
			b.Fatalf("Lock returned while the lock was held: %v", r.err)
		default:
		}
	}
	b.StartTimer()
	t0 := time.Now()
	if err := held.Unlock(context.Background()); err != nil {
		b.Fatalf("Unlock: %v", err)
	}
	r := <-done
	b.StopTimer()
	if r.err != nil {
		b.Fatalf("Lock: %v", r.err)
	}
	return r.l, r.at.Sub(t0)
}

// benchExpecting reports whether m's Client has a confirmed subscription to
// m's channel with a waiter expecting its message there.
func benchExpecting(m *Mutex) bool {
	n := m.c.notify
	n.mu.Lock()
	s := n.subs[subKey{waiterChannel(m.keys.channel, m.c.id), ownPubSub}]
	n.mu.Unlock()
	if s == nil {
		return false
	}
	select {
	case <-s.ready:
	default:
		return false
	}
	s.tmu.Lock()
	defer s.tmu.Unlock()
	return len(s.targets) > 0
}

// benchScriptCalls returns the EVALSHA and EVAL calls the server executed,
// asked over the probe's connection.
func benchScriptCalls(tb testing.TB, probe rueidis.Client) int64 {
	tb.Helper()
	info, err := probe.Do(context.Background(), probe.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		tb.Fatalf("INFO commandstats: %v", err)
	}
	calls, err := parseCommandStats(info)
	if err != nil {
		tb.Fatal(err)
	}
	return calls["evalsha"] + calls["eval"]
}

// benchPingRoundTrip returns the median of n PING round trips.
func benchPingRoundTrip(tb testing.TB, rc rueidis.Client, n int) time.Duration {
	tb.Helper()
	ctx := context.Background()
	ping := rc.B().Ping().Build().Pin()
	rtts := make([]time.Duration, n)
	for i := range rtts {
		start := time.Now()
		if err := rc.Do(ctx, ping).Error(); err != nil {
			tb.Fatalf("PING: %v", err)
		}
		rtts[i] = time.Since(start)
	}
	slices.Sort(rtts)
	return benchPercentile(rtts, 50)
}

// benchPercentile returns the p-th percentile (nearest rank) of sorted.
func benchPercentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// runOnHandles runs body in b.RunParallel with at least perHandle
// goroutines for each of handles: goroutine i (from 0) loops with
// handles[i%len(handles)].
func runOnHandles[H any](b *testing.B, handles []H, perHandle int, body func(pb *testing.PB, i int, h H)) {
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism(max(1, (perHandle*len(handles)+procs-1)/procs))
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1) - 1)
		body(pb, i, handles[i%len(handles)])
	})
}

// benchLockUnlock takes a lease with lock and releases it, once; it stops
// the benchmark when either fails.
func benchLockUnlock(tb testing.TB, lock func(context.Context) (*Lease, error)) {
	tb.Helper()
	if !benchCycle(tb, context.Background(), lock) {
		tb.FailNow()
	}
}

// benchWaitUnsubscribed waits until nobody is subscribed to channel, or to
// a Client's channel of the same lock (waiterChannel), so that the
// unsubscriptions of waiters that left are counted.
func benchWaitUnsubscribed(tb testing.TB, e *env, channel string) {
	tb.Helper()
	eventually(tb, 5*time.Second, func() bool {
		return !slices.ContainsFunc(e.channels(tb), func(ch string) bool { return strings.HasPrefix(ch, channel) })
	}, "%s still has subscribers", channel)
}

// commandCalls returns, by the name INFO commandstats gives them ("evalsha",
// "pubsub|shardchannels"), the calls of every command srv executed since it
// started.
func commandCalls(tb testing.TB, srv *redistest.Server) map[string]int64 {
	tb.Helper()
	info, err := srv.Do("INFO", "commandstats")
	if err != nil {
		tb.Fatalf("INFO commandstats: %v", err)
	}
	calls, err := parseCommandStats(info)
	if err != nil {
		tb.Fatal(err)
	}
	cpu, err := srv.Do("INFO", "cpu")
	if err != nil {
		tb.Fatalf("INFO cpu: %v", err)
	}
	calls[serverCPU] = parseServerCPU(cpu)
	calls[clientCPU] = processCPU(tb)
	return calls
}

// clientCPU is the entry of commandCalls' map that holds this process's
// CPU time (user and system, every thread) in microseconds: the client
// side of the work, measured on its own, whatever else runs on the machine.
const clientCPU = "\x00client-cpu-usec"

// processCPU returns this process's CPU time so far, in microseconds.
func processCPU(tb testing.TB) int64 {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return ru.Utime.Nano()/1e3 + ru.Stime.Nano()/1e3
}

// serverCPU is the entry of commandCalls' map that holds the server's CPU
// time (user and system, main thread and others) in microseconds.
const serverCPU = "\x00cpu-usec"

// scriptTime is the entry of parseCommandStats' map that holds the time the
// server spent running scripts (EVALSHA, EVAL and FCALL, with the commands
// they call), in microseconds.
const scriptTime = "\x00script-usec"

// parseServerCPU reads used_cpu_sys and used_cpu_user of INFO cpu, in
// microseconds (0 when missing).
func parseServerCPU(info string) int64 {
	var sum float64
	for line := range strings.Lines(info) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return int64(sum * 1e6)
}

// parseCommandStats reads the calls of the lines
// "cmdstat_NAME:calls=N,usec=...,..." of INFO commandstats.
func parseCommandStats(info string) (map[string]int64, error) {
	calls := make(map[string]int64)
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("commandstats: malformed line %q", line)
		}
		found := false
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			if k != "calls" && (k != "usec" || (name != "evalsha" && name != "eval" && name != "fcall")) {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("commandstats: line %q: %w", line, err)
			}
			if k == "usec" {
				calls[scriptTime] += n
				continue
			}
			calls[name], found = n, true
		}
		if !found {
			return nil, fmt.Errorf("commandstats: no calls in line %q", line)
		}
	}
	if len(calls) == 0 {
		return nil, fmt.Errorf("commandstats: no cmdstat_ line in %q", info)
	}
	return calls, nil
}

// commandCount is what the server executed between two commandCalls.
type commandCount struct {
	calls  map[string]int64 // by command, observation commands left out
	all    int64            // every command, those run by scripts included
	client int64            // the commands clients sent
	cpu    int64            // the server's CPU time, µs (observation included)
	script int64            // the server's time inside scripts, µs
	// clientCPU is this process's CPU time, µs: the Clients' work, and
	// the benchmark's own.
	clientCPU int64
}

// benchObserver reports the commands not counted as work: those the
// benchmarks send to watch the server (INFO, PUBSUB), and the HELLO with
// which rueidis opens one more of its connections, whenever it does.
func benchObserver(name string) bool {
	return name == "info" || name == "hello" || strings.HasPrefix(name, "pubsub|")
}

// commandDelta counts the commands executed between before and after.
// Commands a Lua script of the library calls are taken as run by scripts:
// the library sends none of them itself.
func commandDelta(tb testing.TB, before, after map[string]int64) commandCount {
	tb.Helper()
	inScripts := scriptCommands(tb)
	d := commandCount{calls: make(map[string]int64)}
	for name, n := range after {
		n -= before[name]
		switch name {
		case serverCPU:
			d.cpu = n
			continue
		case scriptTime:
			d.script = n
			continue
		case clientCPU:
			d.clientCPU = n
			continue
		}
		if n == 0 || benchObserver(name) {
			continue
		}
		d.calls[name] = n
		d.all += n
		if !inScripts[name] {
			d.client += n
		}
	}
	return d
}

// reportCommands reports cmds/<per>, allcmds/<per>, srv-µs/<per> (the
// server's CPU time), script-µs/<per> (its time inside scripts) and
// cli-µs/<per> (this process's CPU time) for n units of work.
func reportCommands(b *testing.B, d commandCount, n int, per string) {
	b.Helper()
	b.ReportMetric(float64(d.clientCPU)/float64(n), "cli-µs/"+per)
	b.ReportMetric(float64(d.cpu)/float64(n), "srv-µs/"+per)
	b.ReportMetric(float64(d.script)/float64(n), "script-µs/"+per)
	b.ReportMetric(float64(d.client)/float64(n), "cmds/"+per)
	b.ReportMetric(float64(d.all)/float64(n), "allcmds/"+per)
}

var scriptCallPattern = regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z]+)['"]`)

// scriptCommands returns the lower-cased names of the commands called by
// the library's Lua scripts (lua/*.lua).
func scriptCommands(tb testing.TB) map[string]bool {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("lua", "*.lua"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no Lua scripts in lua/: %v", err)
	}
	names := make(map[string]bool)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		for _, m := range scriptCallPattern.FindAllStringSubmatch(string(src), -1) {
			names[strings.ToLower(m[1])] = true
		}
	}
	return names
}

// BenchmarkMutexWhileHolding10000 measures Lock+Unlock of a free lock, one
// at a time, by a Client that holds 10 000 other leases: what an
// acquisition costs must not grow with the leases the Client holds.
func BenchmarkMutexWhileHolding10000(b *testing.B) {
	const n = 10000
	e := standaloneEnv(b)
	c := e.client(b)
	ctx := context.Background()
	leases := benchHold(b, ctx, c, "bench:holding:", n)
	defer func() {
		b.StopTimer() // releasing the held leases is not the measure
		for _, l := range leases {
			l.Unlock(ctx)
		}
	}()
	m := c.Mutex("bench:holding")
	b.ResetTimer()
	for range b.N {
		if !benchCycle(b, ctx, m.Lock) {
			return
		}
	}
}

// benchHold locks the Mutexes prefix0 to prefix<n-1> and returns their
// leases.
func benchHold(b *testing.B, ctx context.Context, c *Client, prefix string, n int) []*Lease {
	leases := make([]*Lease, 0, n)
	for i := range n {
		l, err := c.Mutex(prefix + strconv.Itoa(i)).Lock(ctx)
		if err != nil {
			b.Fatalf("Lock: %v", err)
		}
		leases = append(leases, l)
	}
	return leases
}

// BenchmarkHeld10000 holds 10 000 Mutex leases on one Client with the
// default watchdog lease (a renewal pass every 10 s) and reports what
// holding costs per lease, in each LossDetection mode:
//
//   - track-cmds/lease: commands to register the lease's key for tracking
//     (CLIENT CACHING and HGET; 0 on renewal).
//   - pass-allcmds/lease: commands the server runs per lease for one
//     renewal pass: the renewal script's share and what it calls, and with
//     tracking the read that registers the key again after the renewal
//     changed it.
//   - srv-B/lease: the server's memory per held lease (used_memory): the
//     lock hash (which keeps the fencing counter), and with tracking its
//     entry in the tracking table.
//   - heap-B/lease: the Client's heap per held lease.
//
// Run it with -benchtime 1x: each run holds the leases through one pass.
func BenchmarkHeld10000(b *testing.B) {
	for _, mode := range []LossDetection{DetectOnChange, DetectOnRenewal} {
		b.Run(strings.ReplaceAll(mode.String(), " ", "-"), func(b *testing.B) {
			const n = 10000
			e := ownServer(b)
			ctx := context.Background()
			c := e.client(b)
			if mode == DetectOnRenewal {
				c = e.renewalClient(b)
			}
			benchLockUnlock(b, c.Mutex("warm-up").Lock)
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			heap := ms.HeapAlloc
			mem := serverMemory(b, e.server)
			before := commandCalls(b, e.server)
			start := time.Now()
			leases := benchHold(b, ctx, c, "held:", n)
			time.Sleep(200 * time.Millisecond) // every key read for tracking
			locked := commandDelta(b, before, commandCalls(b, e.server))
			runtime.GC()
			runtime.ReadMemStats(&ms)
			heapPer := float64(int64(ms.HeapAlloc)-int64(heap)) / n
			srvPer := float64(serverMemory(b, e.server)-mem) / n
			before = commandCalls(b, e.server)
			b.ResetTimer()
			// The first pass comes a third of the watchdog lease after the
			// first lease was granted.
			time.Sleep(time.Until(start.Add(defaultWatchdogLease/3 + time.Second)))
			b.StopTimer()
			pass := commandDelta(b, before, commandCalls(b, e.server))
			b.ReportMetric(heapPer, "heap-B/lease")
			b.ReportMetric(srvPer, "srv-B/lease")
			b.ReportMetric(float64(2*locked.calls["client|caching"])/n, "track-cmds/lease")
			b.ReportMetric(float64(pass.all)/n, "pass-allcmds/lease")
			for _, l := range leases {
				if err := l.Unlock(ctx); err != nil {
					b.Fatalf("Unlock: %v", err)
				}
			}
		})
	}
}

// serverMemory is the server's used_memory in bytes.
func serverMemory(tb testing.TB, srv *redistest.Server) int64 {
	tb.Helper()
	info, err := srv.Do("INFO", "memory")
	if err != nil {
		tb.Fatalf("INFO memory: %v", err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	tb.Fatal("INFO memory without used_memory")
	return 0
}

// BenchmarkIdleWaiting measures what waiting costs while nothing changes:
// each of clients Clients has one goroutine blocked in Lock on each of
// locks locks that another Client holds (with a lease its watchdog does
// not renew within the run). Each op is one second of that idle waiting,
// measured once the waiters settled. It reports the server's commands per
// (waiting Client, lock) per second: in all (cmds/wait/s, those the scripts
// run included), and by command (<command>/wait/s), summed over the
// masters on Cluster; and the calls the waiting Clients make (the scripts,
// subscriptions and reads they send: calls/wait/s).
func BenchmarkIdleWaiting(b *testing.B) {
	for _, shape := range []struct{ clients, locks int }{{1, 1000}, {10, 100}} {
		for _, where := range []string{"standalone", "cluster"} {
			b.Run(fmt.Sprintf("%s/%dx%d", where, shape.clients, shape.locks), func(b *testing.B) {
				e := standaloneEnv(b)
				if where == "cluster" {
					e = clusterEnv(b)
				}
				benchIdleWaiting(b, e, shape.clients, shape.locks, 10*time.Minute)
			})
		}
	}
}

// BenchmarkWaitingWhileHolderRenews is BenchmarkIdleWaiting (one Client
// waiting on 1 000 locks) with a holder whose watchdog renews every lock
// every second (a lease of 3 s): each renewal changes the lock's key, and
// so each waiting Client reads it again.
func BenchmarkWaitingWhileHolderRenews(b *testing.B) {
	for _, where := range []string{"standalone", "cluster"} {
		b.Run(where, func(b *testing.B) {
			e := standaloneEnv(b)
			if where == "cluster" {
				e = clusterEnv(b)
			}
			benchIdleWaiting(b, e, 1, 1000, 3*time.Second)
		})
	}
}

// benchIdleWaiting measures the waiting of clients Clients on locks locks
// that a holder holds with a watchdog lease of lease.
func benchIdleWaiting(b *testing.B, e *env, clients, locks int, lease time.Duration) {
	ctx := context.Background()
	prefix := fmt.Sprintf("bench:idle:%d:%d:%v:", clients, locks, lease)
	holder := e.client(b, WithWatchdogLease(lease))
	helds := make([]*Lease, locks)
	for i := range helds {
		l, err := holder.Mutex(prefix + strconv.Itoa(i)).Lock(ctx)
		if err != nil {
			b.Fatalf("Lock: %v", err)
		}
		helds[i] = l
	}
	defer func() {
		for _, l := range helds {
			_ = l.Unlock(ctx)
		}
	}()
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for range clients {
		c := e.client(b)
		for i := range locks {
			m := c.Mutex(prefix + strconv.Itoa(i))
			wg.Go(func() {
				if l, err := m.Lock(wctx); err == nil {
					b.Errorf("a waiter took %s, which stays held", m.name)
					_ = l.Unlock(ctx)
				}
			})
		}
	}
	// Settled: every waiter queued, subscribed and past its first look.
	time.Sleep(3 * time.Second)
	before := clusterCommandCalls(b, e)
	b.ResetTimer()
	time.Sleep(time.Duration(b.N) * time.Second)
	b.StopTimer()
	d := commandDelta(b, before, clusterCommandCalls(b, e))
	per := float64(b.N) * float64(clients*locks) // (Client, lock) seconds
	b.ReportMetric(float64(d.all)/per, "cmds/wait/s")
	b.ReportMetric(float64(d.client)/per, "calls/wait/s")
	for name, n := range d.calls {
		b.ReportMetric(float64(n)/per, name+"/wait/s")
	}
}

// clusterCommandCalls is commandCalls of e's server, or summed over the
// masters of its Cluster (the CPU entries too).
func clusterCommandCalls(tb testing.TB, e *env) map[string]int64 {
	tb.Helper()
	if e.cluster == nil {
		return commandCalls(tb, e.server)
	}
	sum := make(map[string]int64)
	for _, m := range e.cluster.Masters {
		for name, n := range commandCalls(tb, m) {
			sum[name] += n
		}
	}
	return sum
}
