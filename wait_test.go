package redisync

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync/internal/redistest"
)

// TestIdleWaitingCostsLittle: goroutines of one Client waiting on locks
// another Client holds cost a few commands per lock and pass, not a script
// per waiter and second, nothing per waiter, and a few goroutines whatever
// the number of locks.
func TestIdleWaitingCostsLittle(t *testing.T) {
	const names, perName = 20, 25
	t.Run("standalone", func(t *testing.T) {
		e := ownServer(t)
		d, extra := idleWaiting(t, e, names, perName)
		// One script per pass (every second) renewing the Client's deadline
		// on each of the locks and reading its holder's lease: an HSET, an
		// HMGET and a PTTL per lock, and now and then the keys' expiry.
		require.LessOrEqual(t, d.calls["evalsha"], int64(6), "scripts while waiting: %v", d.calls)
		require.LessOrEqual(t, d.all, int64(2*names*3*4+20), "commands while waiting: %v", d.calls)
		require.LessOrEqual(t, extra, 10, "goroutines beyond the waiters")
	})
	t.Run("cluster", func(t *testing.T) {
		e := clusterEnv(t)
		d, extra := idleWaiting(t, e, names, perName)
		// One script per slot and pass: each lock has a slot of its own.
		require.LessOrEqual(t, d.calls["evalsha"], int64(2*names*4), "scripts while waiting: %v", d.calls)
		require.LessOrEqual(t, d.all, int64(2*names*4*4+20), "commands while waiting: %v", d.calls)
		require.LessOrEqual(t, extra, 10+4*len(e.masters()), "goroutines beyond the waiters")
	})
}

// idleWaiting has perName goroutines of one Client wait on each of names
// Mutex and names FairMutex locks that another Client holds, and returns
// the commands the env's servers ran over 3 s once they settled, and the
// goroutines beyond the waiters.
func idleWaiting(t *testing.T, e *env, names, perName int) (commandCount, int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder := e.client(t, WithWatchdogLease(10*time.Minute))
	waiting := e.client(t)
	prefix := "idle:" + t.Name() + ":"
	var leases []*Lease
	for i := range names {
		l, err := holder.Mutex(fmt.Sprint(prefix, i)).Lock(ctx)
		require.NoError(t, err)
		fl, err := holder.FairMutex(fmt.Sprint(prefix, i)).Lock(ctx)
		require.NoError(t, err)
		leases = append(leases, l, fl)
	}
	goroutines := runtime.NumGoroutine()
	var wg sync.WaitGroup
	for i := range 2 * names * perName {
		lock := waiting.Mutex(fmt.Sprint(prefix, i%names)).Lock
		if (i/names)%2 == 1 {
			lock = waiting.FairMutex(fmt.Sprint(prefix, i%names)).Lock
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := lock(ctx)
			if err == nil {
				l.Unlock(context.Background())
			} else if ctx.Err() == nil {
				t.Errorf("waiting: %v", err)
			}
		}()
	}
	eventually(t, 10*time.Second, func() bool {
		return queuedMutexWaiters(t, ctx, holder, fmt.Sprint(prefix, 0)) >= int64(perName)
	}, "waiters did not queue")
	time.Sleep(500 * time.Millisecond) // every waiter settled
	before := e.commandCalls(t)
	const window = 3 * time.Second
	time.Sleep(window)
	d := commandDelta(t, before, e.commandCalls(t))
	extra := runtime.NumGoroutine() - goroutines - 2*names*perName
	t.Logf("%s: %d waiters on %d Mutex and %d FairMutex locks over %v: %d commands (%v), %d goroutines beyond the waiters",
		e.name, 2*names*perName, names, names, window, d.all, d.calls, extra)
	cancel()
	wg.Wait()
	for _, l := range leases {
		require.NoError(t, l.Unlock(context.Background()))
	}
	return d, extra
}

// commandCalls sums INFO commandstats over the env's masters.
func (e *env) commandCalls(t testing.TB) map[string]int64 {
	t.Helper()
	sum := make(map[string]int64)
	for _, s := range e.masters() {
		for k, v := range commandCalls(t, s) {
			sum[k] += v
		}
	}
	return sum
}

// manyWaiters are goroutines of one Client, each waiting for one of many
// locks that another Client holds.
type manyWaiters struct {
	waiter  *Client
	held    []*Lease        // the holder's, one per lock
	waiting []<-chan *Lease // the waiters', one per lock
	extra   int             // goroutines run beyond the waiters
}

// waitOnMany has a Client take n locks (named prefix:i) with a lease of a
// minute, which a waiter that missed a release would wait for, and a
// goroutine of another Client wait for each, until every lock's channel has
// its subscription.
func waitOnMany(t *testing.T, ctx context.Context, e *env, prefix string, n int) manyWaiters {
	t.Helper()
	holder := e.client(t, WithWatchdogLease(time.Minute))
	w := manyWaiters{waiter: e.client(t)}
	for i := range n {
		l, err := holder.Mutex(fmt.Sprint(prefix, ":", i)).Lock(ctx)
		require.NoError(t, err)
		w.held = append(w.held, l)
	}
	goroutines := runtime.NumGoroutine()
	for i := range n {
		w.waiting = append(w.waiting, w.waiter.Mutex(fmt.Sprint(prefix, ":", i)).Acquire(ctx))
	}
	e.awaitChannels(t, n, 20*time.Second, "waiters did not subscribe")
	time.Sleep(200 * time.Millisecond) // every waiter settled
	w.extra = runtime.NumGoroutine() - goroutines - n
	return w
}

// A Client waiting on many locks runs a few goroutines for its
// subscriptions, whatever their number: one connection for them all on
// standalone, one per master on Cluster. Every waiter is still woken.
func TestWaitingOnManyLocks(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const names = 300
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		w := waitOnMany(t, ctx, e, "many", names)
		t.Logf("%s: %d waiters on %d locks: %d goroutines beyond the waiters", e.name, names, names, w.extra)
		limit := 10
		if e.cluster != nil {
			limit = 10 + 4*len(e.cluster.Masters)
		}
		require.LessOrEqual(t, w.extra, limit, "goroutines beyond the waiters")
		handOver(t, ctx, w.held, w.waiting, 20*time.Second)
	})
}

// handOver unlocks every lease of held, and every waiter then takes the
// lock it waited for, each within d, and unlocks it.
func handOver(t *testing.T, ctx context.Context, held []*Lease, waiting []<-chan *Lease, d time.Duration) {
	t.Helper()
	for _, l := range held {
		require.NoError(t, l.Unlock(ctx))
	}
	unlockAll(t, ctx, waiting, d)
}

// handOverAcrossBreak breaks the waiters' pub/sub connections with kill,
// hands half the locks over at once, while the connections are down or
// being dialled again, and the others once their channels are subscribed
// again.
func handOverAcrossBreak(t *testing.T, ctx context.Context, e *env, w manyWaiters, kill func()) {
	t.Helper()
	half := len(w.held) / 2
	kill()
	handOver(t, ctx, w.held[:half], w.waiting[:half], 20*time.Second)
	e.awaitChannels(t, len(w.held)-half, 10*time.Second, "channels not subscribed again")
	handOver(t, ctx, w.held[half:], w.waiting[half:], 20*time.Second)
}

// The pub/sub connections of a Client on Cluster, one per master, are
// killed while its goroutines wait, and the locks are released: every
// waiter is woken, whether the release came before its channel was
// subscribed again or after.
func TestClusterWaitersAfterSubscriptionBreaks(t *testing.T) {
	e := clusterEnv(t)
	const names = 60
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := waitOnMany(t, ctx, e, "breaks", names)
	handOverAcrossBreak(t, ctx, e, w, func() {
		for _, m := range e.cluster.Masters {
			mustDo(t, m, "CLIENT", "KILL", "TYPE", "pubsub")
		}
	})
}

// A master fails over, killed or alive (its replica takes over), while a
// Client's goroutines wait on locks of every master: the channels of its
// slots move to the promoted replica (a live master drops them when it
// learns that it lost its slots), and every waiter is woken by the releases
// that follow.
func TestClusterWaitersFollowAFailover(t *testing.T) {
	for _, killed := range []bool{true, false} {
		name := "takeover"
		if killed {
			name = "killed"
		}
		t.Run(name, func(t *testing.T) { waitersFollowAFailover(t, killed) })
	}
}

func waitersFollowAFailover(t *testing.T, killed bool) {
	e := ownCluster(t)
	const names = 30
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := waitOnMany(t, ctx, e, "failover", names)
	master, replica := slotOwner(t, e.cluster, w.held[0].h.keys.lock)
	eventually(t, 10*time.Second, func() bool {
		return replOffset(t, master, "master_repl_offset") == replOffset(t, replica, "slave_repl_offset")
	}, "replica not caught up")
	if killed {
		require.NoError(t, master.Kill())
	} else {
		mustDo(t, replica, "CLUSTER", "FAILOVER", "TAKEOVER")
	}
	promoted := awaitPromotion(t, replica, 30*time.Second)
	// The masters now: the promoted replica and the others.
	now := &env{name: e.name, cluster: &redistest.Cluster{Masters: []*redistest.Server{replica}}}
	for _, m := range e.cluster.Masters {
		if m != master {
			now.cluster.Masters = append(now.cluster.Masters, m)
		}
	}
	now.awaitChannels(t, names, 20*time.Second, "channels not subscribed again")
	t.Logf("channels subscribed again %v after the replica's promotion", time.Since(promoted).Round(time.Millisecond))
	// The holder's Client may learn of the new master after its first
	// attempts: connection errors until then.
	for _, l := range w.held {
		unlockRetrying(t, ctx, l)
	}
	unlockAll(t, ctx, w.waiting, 20*time.Second)
}

// unlockRetrying unlocks l, retrying (as is safe) for up to 10 s while the
// connection fails: its first use after a break may be what finds it.
func unlockRetrying(t *testing.T, ctx context.Context, l *Lease) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := l.Unlock(ctx)
		if err == nil || !transient(err) || time.Now().After(deadline) {
			require.NoError(t, err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWaitingAtScale: goroutines spread over 4 Clients wait on many locks
// (2 000 on 200, 100 000 on 10 000 under REDISYNC_SOAK), 10 per lock; once
// they settled, every lock is released and each waiter takes and releases
// it in turn, until nothing is left.
func TestWaitingAtScale(t *testing.T) {
	e := standaloneEnv(t)
	names := soak(200, 10000)
	const perName, clients = 10, 4
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	prefix := "scale" + strconv.Itoa(names)
	holder := e.client(t, WithPrefix(prefix), WithWatchdogLease(10*time.Minute))
	waiting := e.clients(t, clients, WithPrefix(prefix))
	held := make([]*Lease, names)
	for i := range names {
		l := mustLock(t, ctx, holder.Mutex(strconv.Itoa(i)).Lock)
		held[i] = l
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	var wg sync.WaitGroup
	var acquired atomic.Int64
	for i := range names * perName {
		m := waiting[i%clients].Mutex(strconv.Itoa(i % names))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := m.Lock(ctx)
			if err != nil {
				t.Errorf("Lock: %v", err)
				return
			}
			acquired.Add(1)
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("Unlock: %v", err)
			}
		}()
	}
	eventually(t, 5*time.Minute, func() bool {
		return queuedMutexWaiters(t, ctx, holder, strconv.Itoa(names-1)) == perName
	}, "waiters did not queue")
	settled := time.Since(start)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	start = time.Now()
	for _, l := range held {
		require.NoError(t, l.Unlock(ctx))
	}
	wg.Wait()
	t.Logf("%d goroutines on %d locks across %d Clients: queued in %v, %.1f KiB of heap per waiter; drained (%d acquisitions) in %v",
		names*perName, names, clients, settled.Round(time.Millisecond), float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/1024/float64(names*perName),
		acquired.Load(), time.Since(start).Round(time.Millisecond))
	require.EqualValues(t, names*perName, acquired.Load())
	e.requireNothingLeft(t, prefix+":")
}
