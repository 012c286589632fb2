package redisync

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync/internal/redistest"
)

// TestIdleWaitingCostsLittle: goroutines of one Client waiting on locks
// another Client holds cost one command per lock and pass, not a script
// per waiter and second, nothing per waiter, and a few goroutines whatever
// the number of locks; on Cluster too, where each lock has a slot of its
// own.
func TestIdleWaitingCostsLittle(t *testing.T) {
	const names, perName = 20, 25
	// Per lock and pass (every second, 3 or 4 in the window): an HSET
	// renewing the Client's deadline; whether the lock is held, and by
	// whom, comes from the Client's cache, read from Redis (CLIENT
	// CACHING, HMGET, PTTL) at the first pass only. No script.
	const most = int64(2*names*(4+3) + 20)
	t.Run("standalone", func(t *testing.T) {
		e := ownServer(t)
		d, extra := idleWaiting(t, e, names, perName)
		require.LessOrEqual(t, d.calls["evalsha"], int64(6), "scripts while waiting: %v", d.calls)
		require.LessOrEqual(t, d.all, most, "commands while waiting: %v", d.calls)
		require.LessOrEqual(t, extra, 10, "goroutines beyond the waiters")
	})
	t.Run("cluster", func(t *testing.T) {
		e := clusterEnv(t)
		d, extra := idleWaiting(t, e, names, perName)
		require.LessOrEqual(t, d.calls["evalsha"], int64(6), "scripts while waiting: %v", d.calls)
		require.LessOrEqual(t, d.all, most+int64(3*len(e.masters())), "commands while waiting: %v", d.calls)
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
		// Every waiter in a queue in Redis, none waiting in its Client.
		lock := waiting.Mutex(fmt.Sprint(prefix, i%names), WithLocalPasses(0, 0)).Lock
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
	extra := fewestGoroutines() - goroutines - 2*names*perName
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
	w.extra = fewestGoroutines() - goroutines - n
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
		// Every waiter in a queue in Redis, none waiting in its Client.
		m := waiting[i%clients].Mutex(strconv.Itoa(i%names), WithLocalPasses(0, 0))
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

// serverMillis is the server's clock in ms, as the scripts read it.
func serverMillis(t testing.TB, ctx context.Context, rc rueidis.Client) int64 {
	t.Helper()
	v, err := rc.Do(ctx, rc.B().Time().Build()).AsStrSlice()
	require.NoError(t, err)
	s, _ := strconv.ParseInt(v[0], 10, 64)
	us, _ := strconv.ParseInt(v[1], 10, 64)
	return s*1000 + us/1000
}

// lockAsync runs Lock in the background and delivers its outcome.
type lockOutcome struct {
	l   *Lease
	err error
	at  time.Time
}

func lockAsync(ctx context.Context, m *Mutex) <-chan lockOutcome { return acquireAsync(ctx, m.Lock) }

// acquireAsync runs lock in a goroutine of its own; its outcome comes on
// the channel.
func acquireAsync(ctx context.Context, lock func(context.Context) (*Lease, error)) <-chan lockOutcome {
	ch := make(chan lockOutcome, 1)
	go func() {
		l, err := lock(ctx)
		ch <- lockOutcome{l, err, time.Now()}
	}()
	return ch
}

// awaitQueued waits until the lock's queue has n places.
// awaitSubscriptionReady waits until c's subscription to channel took
// effect on the server.
func awaitSubscriptionReady(t testing.TB, c *Client, channel string) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool {
		c.notify.mu.Lock()
		s := c.notify.subs[subKey{channel, ownPubSub}]
		c.notify.mu.Unlock()
		if s == nil {
			return false
		}
		select {
		case <-s.ready:
			return true
		default:
			return false
		}
	}, "the subscription to %s did not take effect", channel)
}

func awaitQueued(t testing.TB, ctx context.Context, rc rueidis.Client, keys lockKeys, n int64) {
	t.Helper()
	eventually(t, 5*time.Second, func() bool {
		got, err := rc.Do(ctx, rc.B().Zcard().Key(keys.queue).Build()).AsInt64()
		return err == nil && got == n
	}, "the queue of %s did not reach %d places", keys.lock, n)
}

// TestWaiterDroppedFromQueueLearnsAtNextPass: a release that takes a
// Client for dead drops its waiter from the queue and hands the lock past
// it, and a later waiter of the same Client writes the Client's deadline
// anew before its next presence pass. The dropped waiter still learns at
// that pass that its place is gone, and queues again: it gets the lock
// while another Client keeps handing it on, rather than waiting for a
// message that nobody will send.
func TestWaiterDroppedFromQueueLearnsAtNextPass(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		rc := e.rueidisClient(t)
		busy, lapsed := e.client(t), e.client(t)
		name := "dropped:" + t.Name()
		keys := busy.keysFor(name)
		// Every waiter queues in Redis, none in its Client.
		first, err := busy.Mutex(name, WithLocalPasses(0, 0)).Lock(ctx)
		require.NoError(t, err)

		w1 := lockAsync(ctx, lapsed.Mutex(name, WithLocalPasses(0, 0)))
		awaitQueued(t, ctx, rc, keys, 1)
		// A waiter attempts once more when its subscription takes effect,
		// which writes its Client's deadline anew: that must be over before
		// the deadline is made to lapse below.
		awaitSubscriptionReady(t, lapsed, waiterChannel(keys.channel, lapsed.ID()))
		next := lockAsync(ctx, busy.Mutex(name, WithLocalPasses(0, 0)))
		awaitQueued(t, ctx, rc, keys, 2)
		awaitSubscriptionReady(t, busy, waiterChannel(keys.channel, busy.ID()))
		time.Sleep(300 * time.Millisecond) // the attempts that follow
		// The lapsed Client's deadline passes, as when its presence loop
		// stalls or its connection is held up.
		lapsed.presence.stall.Lock()
		stalled := true
		defer func() {
			if stalled {
				lapsed.presence.stall.Unlock()
			}
		}()
		require.NoError(t, rc.Do(ctx, rc.B().Hset().Key(keys.waiters).FieldValue().FieldValue("\x00c"+lapsed.ID(), "1").Build()).Error())
		require.NoError(t, first.Unlock(ctx)) // passes w1 over: dropped
		o := <-next
		require.NoError(t, o.err)
		// A second waiter of the lapsed Client writes its deadline anew.
		w3 := lockAsync(ctx, lapsed.Mutex(name, WithLocalPasses(0, 0)))
		awaitQueued(t, ctx, rc, keys, 1)
		lapsed.presence.stall.Unlock()
		stalled = false

		// The busy Client keeps the lock busy: every holder holds it a
		// while, and its goroutines queue again at once.
		stop := make(chan struct{})
		bctx, bcancel := context.WithCancel(ctx)
		defer bcancel()
		var wg sync.WaitGroup
		holders := make(chan *Lease, 4)
		holders <- o.l
		for range 2 {
			wg.Go(func() {
				for i := 0; i < 200; i++ {
					select {
					case <-stop:
						return
					default:
					}
					l, err := busy.Mutex(name, WithLocalPasses(0, 0)).Lock(bctx)
					if err != nil {
						return
					}
					holders <- l
				}
			})
		}
		wg.Go(func() {
			for {
				select {
				case l := <-holders:
					time.Sleep(100 * time.Millisecond)
					l.Unlock(context.WithoutCancel(ctx))
				case <-stop:
					return
				}
			}
		})
		start := time.Now()
		got := make(chan lockOutcome, 2)
		for _, w := range []<-chan lockOutcome{w1, w3} {
			wg.Go(func() {
				o := <-w
				if o.err == nil {
					holders <- o.l
				}
				got <- o
			})
		}
		for range 2 {
			select {
			case o := <-got:
				require.NoError(t, o.err)
				t.Logf("a waiter of the lapsed Client got the lock %v after the release that dropped the first", o.at.Sub(start).Round(time.Millisecond))
			case <-time.After(10 * time.Second):
				t.Fatalf("a waiter of the lapsed Client still waits %v after the release that dropped it", time.Since(start).Round(time.Millisecond))
			}
		}
		close(stop)
		bcancel()
		wg.Wait()
		for len(holders) > 0 {
			(<-holders).Unlock(ctx)
		}
	})
}

// TestPresencePassFollowsShorterExpiry: a Client that waits on one lock
// with a long waiter expiry and then on others with a short one renews its
// deadline on those at the pace of the short one: it never lapses while
// the waiters wait. A Client with client-side caching (plain renewals) and
// one without (the presence script, several locks to a script on
// standalone) alike.
func TestPresencePassFollowsShorterExpiry(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		for _, caching := range []bool{true, false} {
			t.Run(fmt.Sprintf("caching %v", caching), func(t *testing.T) {
				ctx := withTimeout(t, 30*time.Second)
				rc := e.rueidisClient(t)
				holder := e.client(t)
				waiting := e.client(t)
				if !caching {
					waiting = dial(t, e.addrs)
				}
				const short = 3 * time.Second
				slow := "slowpass:" + t.Name()
				fast := []string{"fastpass:" + t.Name() + ":0", "fastpass:" + t.Name() + ":1", "fastpass:" + t.Name() + ":2"}
				for _, name := range append([]string{slow}, fast...) {
					l, err := holder.Mutex(name).Lock(ctx)
					require.NoError(t, err)
					defer l.Unlock(context.WithoutCancel(ctx))
				}
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				ws := []<-chan lockOutcome{lockAsync(wctx, waiting.Mutex(slow, WithWaiterExpiry(30*time.Second)))}
				awaitQueued(t, ctx, rc, holder.keysFor(slow), 1)
				time.Sleep(200 * time.Millisecond) // the long pass is scheduled
				for _, name := range fast {
					ws = append(ws, lockAsync(wctx, waiting.Mutex(name, WithWaiterExpiry(short))))
					awaitQueued(t, ctx, rc, holder.keysFor(name), 1)
				}
				least := time.Hour
				for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
					for _, name := range fast {
						d, err := rc.Do(ctx, rc.B().Hget().Key(holder.keysFor(name).waiters).Field("\x00c"+waiting.ID()).Build()).AsInt64()
						require.NoError(t, err)
						left := time.Duration(d-serverMillis(t, ctx, rc)) * time.Millisecond
						least = min(least, left)
						require.Greater(t, left, time.Duration(0), "the Client's deadline on %s, with the shorter expiry, lapsed", name)
					}
				}
				t.Logf("the least time left to the deadline: %v (expiry %v)", least, short)
				cancel()
				for _, w := range ws {
					require.ErrorIs(t, (<-w).err, context.Canceled)
				}
			})
		}
	})
}

// TestHandedOverAfterLongWaitIsHeld: a waiter that slept longer than its
// lease while the holder kept the lock is handed a lease that is held and
// valid, with its full time ahead, not one already past its deadline.
func TestHandedOverAfterLongWaitIsHeld(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		const lease = 1500 * time.Millisecond
		holder, waiting := e.client(t, WithWatchdogLease(lease)), e.client(t, WithWatchdogLease(lease))
		name := "longwait:" + t.Name()
		l, err := holder.Mutex(name).Lock(ctx)
		require.NoError(t, err)
		w := lockAsync(ctx, waiting.Mutex(name))
		time.Sleep(2 * lease)
		released := time.Now()
		require.NoError(t, l.Unlock(ctx))
		o := <-w
		require.NoError(t, o.err)
		defer o.l.Unlock(context.WithoutCancel(ctx))
		require.NoError(t, o.l.Err(), "a lease handed over after a long wait was delivered lost")
		deadline, ok := o.l.Deadline()
		require.True(t, ok)
		require.Greater(t, time.Until(deadline), lease/2, "the lease was delivered with little of its time ahead")
		st, err := waiting.Mutex(name).Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, waiting.ID(), st.ClientID())
		// It stays held: renewed by the watchdog, never lost.
		select {
		case <-o.l.Lost():
			t.Fatalf("the lease handed over was lost: %v", o.l.Err())
		case <-time.After(2 * lease):
		}
		t.Logf("handed over %v after the release", o.at.Sub(released).Round(time.Microsecond))
	})
}

// TestLateHandOverIsNotDelivered: a hand-over message that comes late,
// after the lock moved on (the waiter's connection held it up while the
// lock expired and went to another Client), is not taken for the lock: the
// waiter asks Redis, and gets the lock only when it is really its own.
func TestLateHandOverIsNotDelivered(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		rc := e.rueidisClient(t)
		holder, waiting := e.client(t), e.client(t)
		name := "late:" + t.Name()
		keys := holder.keysFor(name)
		l, err := holder.Mutex(name).Lock(ctx)
		require.NoError(t, err)
		w := lockAsync(ctx, waiting.Mutex(name))
		awaitQueued(t, ctx, rc, keys, 1)
		ids, err := rc.Do(ctx, rc.B().Zrange().Key(keys.queue).Min("0").Max("0").Build()).AsStrSlice()
		require.NoError(t, err)
		require.Len(t, ids, 1)
		channel := waiterChannel(keys.channel, waiting.ID())
		// Hand-overs of the past: a token below the holder's, with and
		// without the server's clock at the release (a moment ago).
		for _, stale := range []string{
			fmt.Sprintf("g:%s %d", ids[0], l.Token()-1),
			fmt.Sprintf("g:%s %d %d", ids[0], l.Token()-1, serverMillis(t, ctx, rc)),
		} {
			require.NoError(t, rc.Do(ctx, rc.B().Spublish().Channel(channel).Message(stale).Build()).Error())
		}
		select {
		case o := <-w:
			t.Fatalf("a late hand-over was delivered as the lock (err %v) while another Client holds it", o.err)
		case <-time.After(500 * time.Millisecond):
		}
		require.NoError(t, l.Unlock(ctx))
		o := <-w
		require.NoError(t, o.err)
		require.Greater(t, o.l.Token(), l.Token())
		require.NoError(t, o.l.Unlock(ctx))
	})
}

// handOverSilently hands a lock to the first waiter of its queue as a
// release does, but tells nobody: the message is lost. It returns the
// token the waiter got.
const handOverSilently = `
local h = redis.call('ZPOPMIN', KEYS[2])[1]
local lease, hold, owner = string.match(redis.call('HGET', KEYS[3], h), '^(%d+) (%S+) (%S+)')
redis.call('HDEL', KEYS[3], h)
local v = redis.call('HMGET', KEYS[1], 'token', 't')
local token = math.max(tonumber(v[1]), tonumber(v[2] or '0')) + 1
redis.call('HSET', KEYS[1], 'owner', owner, 'holds', hold, 'token', token)
redis.call('PEXPIRE', KEYS[1], lease)
return token`

// TestHandOverWithoutMessageFoundAtNextPass: a lock handed over to a
// waiter whose message is lost is the waiter's within one presence pass:
// its Client's pass finds it the holder and wakes it.
func TestHandOverWithoutMessageFoundAtNextPass(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		rc := e.rueidisClient(t)
		var fell atomic.Int64
		holder := e.client(t)
		waiting := e.client(t, fallbacks(&fell))
		name := "silent:" + t.Name()
		keys := holder.keysFor(name)
		l, err := holder.Mutex(name).Lock(ctx)
		require.NoError(t, err)
		w := lockAsync(ctx, waiting.Mutex(name))
		awaitQueued(t, ctx, rc, keys, 1)
		token, err := rc.Do(ctx, rc.B().Eval().Script(handOverSilently).Numkeys(3).Key(keys.lock, keys.queue, keys.waiters).Build()).AsInt64()
		require.NoError(t, err)
		handed := time.Now()
		select {
		case o := <-w:
			require.NoError(t, o.err)
			require.Equal(t, uint64(token), o.l.Token())
			require.NoError(t, o.l.Err())
			t.Logf("the waiter found the lock its own %v after it was handed over", o.at.Sub(handed).Round(time.Millisecond))
			require.NoError(t, o.l.Unlock(ctx))
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter whose hand-over message was lost still waits after several presence passes")
		}
		<-l.Lost() // the old holder sees the lock taken
		require.Zero(t, fell.Load(), "waits ended by the fallback")
	})
}

// TestGroupWaiterWithoutMessageFoundAtNextPass: a Group waiting for a lock
// whose release announced nothing (the '1' was lost: here, its '*' was
// taken off the queue before the release) learns at its Client's next
// presence pass that the lock is free, not at the end of the holder's
// lease; no fallback ends its wait.
func TestGroupWaiterWithoutMessageFoundAtNextPass(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		rc := e.rueidisClient(t)
		var fell atomic.Int64
		holder := e.client(t)
		waiting := e.client(t, fallbacks(&fell))
		name := "{silentg}:a"
		l, err := holder.Mutex(name).Lock(ctx)
		require.NoError(t, err)
		done := groupLockAsync(ctx, waiting.Mutex(name), waiting.Mutex("{silentg}:b"))
		keys := holder.keysFor(name)
		awaitQueued(t, ctx, rc, keys, 1) // the Group's '*'
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, rc.Do(ctx, rc.B().Zrem().Key(keys.queue).Member("*").Build()).Error())
		require.NoError(t, l.Unlock(ctx))
		groupAfterRelease(t, ctx, done, time.Now(), "a Group whose release message was lost still waits after several presence passes")
		require.Zero(t, fell.Load(), "waits ended by the fallback")
	})
}

// TestLatchWaiterWithoutMessageFoundAtNextPass: a latch that opened without
// a message (here, its key deleted) releases its waiters at their Client's
// next presence pass, not at the recheck; no fallback ends their wait.
func TestLatchWaiterWithoutMessageFoundAtNextPass(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		rc := e.rueidisClient(t)
		var fell atomic.Int64
		c := e.client(t, fallbacks(&fell))
		lt := c.Latch("silent-latch:" + t.Name())
		ok, err := lt.TrySetCount(ctx, 1)
		require.NoError(t, err)
		require.True(t, ok)
		const waiters = 3
		done := make(chan error, waiters)
		for range waiters {
			go func() { done <- lt.Wait(ctx) }()
		}
		time.Sleep(300 * time.Millisecond) // waiting
		require.NoError(t, rc.Do(ctx, rc.B().Del().Key(lt.key).Build()).Error())
		opened := time.Now()
		for range waiters {
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				t.Fatal("a latch waiter still waits after several presence passes")
			}
		}
		t.Logf("the waiters returned %v after the latch opened", time.Since(opened).Round(time.Millisecond))
		require.Zero(t, fell.Load(), "waits ended by the fallback")
	})
}

// TestWaiterFollowsAHolderThatExtended: the presence pass reads the
// holder's remaining lease once per holder, and the check at its end finds
// a lease extended since and looks again at the new end: a holder that
// extends its lease a few times and then dies (publishing nothing) gives
// the lock to the waiter soon after its last lease ran out.
func TestWaiterFollowsAHolderThatExtended(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		holder, waiting := e.client(t), e.client(t)
		name := "extended:" + t.Name()
		l, err := holder.Mutex(name, WithFixedLease(time.Second)).Lock(ctx)
		require.NoError(t, err)
		w := lockAsync(ctx, waiting.Mutex(name))
		var ends time.Time
		for range 3 {
			time.Sleep(700 * time.Millisecond)
			require.NoError(t, l.Extend(ctx, time.Second))
			ends = time.Now().Add(time.Second)
		}
		// The holder dies: no Unlock, no message; its key expires at ends.
		select {
		case o := <-w:
			require.NoError(t, o.err)
			require.False(t, o.at.Before(ends.Add(-100*time.Millisecond)), "taken %v before the last lease ended", ends.Sub(o.at))
			require.Less(t, o.at.Sub(ends), 2*time.Second, "taken long after the last lease ended")
			require.NoError(t, o.l.Unlock(ctx))
		case <-time.After(10 * time.Second):
			t.Fatalf("the waiter still waits %v after the holder's last lease ended", time.Since(ends).Round(time.Millisecond))
		}
	})
}

// TestOrphanRetriedWhileNothingIsWaited: a failed leave recorded while the
// Client waits for no lock is retried at the presence passes, which run for
// it.
func TestOrphanRetriedWhileNothingIsWaited(t *testing.T) {
	e := standaloneEnv(t)
	c := e.client(t)
	var tries atomic.Int32
	done := make(chan struct{})
	c.presence.orphan(c.keysFor(t.Name()), func(context.Context) error {
		if tries.Add(1) == 1 {
			return errors.New("refused")
		}
		close(done)
		return nil
	})
	select {
	case <-done:
	case <-time.After(5 * renewRetry):
		t.Fatalf("the leave was tried %d times in %v", tries.Load(), 5*renewRetry)
	}
}

// TestOrphanLeftOnClose: a failed leave that the passes still retry when
// the Client closes is tried once more by Close, which returns after it.
func TestOrphanLeftOnClose(t *testing.T) {
	e := standaloneEnv(t)
	c := e.client(t)
	var tries, left atomic.Int32
	c.presence.orphan(c.keysFor(t.Name()), func(context.Context) error {
		tries.Add(1)
		select {
		case <-c.closed:
			left.Add(1)
			return nil
		default:
			return errors.New("refused")
		}
	})
	require.Eventually(t, func() bool { return tries.Load() > 0 }, 5*time.Second, time.Millisecond, "no pass tried the leave")
	require.NoError(t, c.Close())
	require.Equal(t, int32(1), left.Load(), "Close did not try the leave")
}

// TestGroupWaitTimerBeforeALateMessage: a Group waits for a lock until its
// holder's lease runs out; the holder releases just before that, and the
// release's message comes just after the Group's timer. The message was
// late, not lost: the wait is not counted as a lost wake-up, and the Group
// gets the locks.
func TestGroupWaitTimerBeforeALateMessage(t *testing.T) {
	e := standaloneEnv(t)
	ctx := withTimeout(t, 30*time.Second)
	var fell atomic.Int64
	holder := e.client(t)
	waiting, p := e.proxied(t, fallbacks(&fell))
	name := "{lateg}:a"
	l, err := holder.Mutex(name, WithFixedLease(800*time.Millisecond)).Lock(ctx)
	require.NoError(t, err)
	done := groupLockAsync(ctx, waiting.Mutex(name), waiting.Mutex("{lateg}:b"))
	awaitQueued(t, ctx, e.rueidisClient(t), holder.keysFor(name), 1) // the Group's '*'
	time.Sleep(200 * time.Millisecond)                               // its subscription in effect, its timer set
	p.DelayPushes(60 * time.Millisecond)
	pttl, err := e.rueidisClient(t).Do(ctx, e.rueidisClient(t).B().Pttl().Key(holder.keysFor(name).lock).Build()).AsInt64()
	require.NoError(t, err)
	time.Sleep(time.Duration(pttl)*time.Millisecond - 25*time.Millisecond)
	require.NoError(t, l.Unlock(ctx))
	groupAfterRelease(t, ctx, done, time.Now(), "the Group still waits 5s after the release")
	time.Sleep(2 * messageGrace) // a lost wake-up would be counted by then
	require.Zero(t, fell.Load(), "a late message counted as a lost wake-up")
}

// TestPlaceOfAnEndedWaiterLeavesOnceTheConnectionHeals: a waiter gives up
// while its Client's connections are refused, so its leave fails, and they
// stay refused past the passes that retry it. Another waiter of
// the same Client still waits on the lock, so the Client renews its
// deadline there once the connection heals, which would keep the ended
// waiter's place alive: its leave is retried until it succeeds, and the
// release goes to the live waiter at once, not to the place of the one
// that is gone.
func TestPlaceOfAnEndedWaiterLeavesOnceTheConnectionHeals(t *testing.T) {
	e := standaloneEnv(t)
	ctx := withTimeout(t, time.Minute)
	rc := e.rueidisClient(t)
	holder := e.client(t)
	waiting, p := e.proxied(t)
	name := "ghost:" + t.Name()
	keys := holder.keysFor(name)
	l := mustLock(t, ctx, holder.Mutex(name).Lock)
	gone, giveUp := context.WithCancel(ctx)
	ended := make(chan error, 1)
	go func() {
		_, err := waiting.Mutex(name).Lock(gone)
		ended <- err
	}()
	awaitQueued(t, ctx, rc, keys, 1)
	live := lockAsync(ctx, waiting.Mutex(name))
	awaitQueued(t, ctx, rc, keys, 2)
	// Refused for longer than the passes that retry a failed leave.
	p.Refuse()
	giveUp()
	require.ErrorIs(t, <-ended, context.Canceled)
	time.Sleep(5 * time.Second)
	p.Heal()
	// The Client renews its deadline for the live waiter again.
	time.Sleep(2 * time.Second)
	require.NoError(t, l.Unlock(ctx))
	released := time.Now()
	select {
	case o := <-live:
		require.NoError(t, o.err)
		t.Logf("the live waiter got the lock %v after the release", o.at.Sub(released).Round(time.Millisecond))
		require.Less(t, o.at.Sub(released), 1500*time.Millisecond, "the release went to the place of the waiter that gave up")
		require.NoError(t, o.l.Unlock(ctx))
	case <-time.After(10 * time.Second):
		t.Fatal("the live waiter still waits 10s after the release")
	}
}

// groupLockAsync locks a Group of ms in the background.
func groupLockAsync(ctx context.Context, ms ...*Mutex) <-chan lockOutcome {
	done := make(chan lockOutcome, 1)
	go func() {
		gl, err := NewGroup(ms...).Lock(ctx)
		done <- lockOutcome{gl, err, time.Now()}
	}()
	return done
}

// groupAfterRelease waits up to 5s for the Group of done, locked once a
// release at released let it, and unlocks it; it fails with stuck if the
// Group still waits then.
func groupAfterRelease(t *testing.T, ctx context.Context, done <-chan lockOutcome, released time.Time, stuck string) {
	t.Helper()
	lockedWithin(t, ctx, done, 5*time.Second, stuck, "the Group got the locks %v after the release", released)
}

// lockedWithin waits up to d for the acquisition of done, logs when it
// got the lock, with got, which formats its time since since, and unlocks
// it; it fails with stuck if the acquisition failed or still waits then.
func lockedWithin(t *testing.T, ctx context.Context, done <-chan lockOutcome, d time.Duration, stuck, got string, since time.Time) {
	t.Helper()
	select {
	case o := <-done:
		require.NoError(t, o.err)
		t.Logf(got, o.at.Sub(since).Round(time.Millisecond))
		require.NoError(t, o.l.Unlock(ctx))
	case <-time.After(d):
		t.Fatal(stuck)
	}
}

// fewestGoroutines is the fewest goroutines the process ran over a second:
// calls in flight (a presence pass, a timer's count, rueidis' own) run
// goroutines for a moment, which a loaded machine stretches.
func fewestGoroutines() int {
	fewest := math.MaxInt
	for range 10 {
		time.Sleep(100 * time.Millisecond)
		fewest = min(fewest, runtime.NumGoroutine())
	}
	return fewest
}
