package redisson

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/internal/engine"
)

// The waiting of the Redisson locks on the Client's notifier: one
// subscription per channel (and kind of pub/sub) for all the Client's
// waiters, and the presence pass as their liveness net, whatever messages
// are lost.

// redissonWaiters counts the waiters of c on the Redisson channel, once
// every subscription of c to it has taken effect (0 before).
func redissonWaiters(c *Client, channel string) int { return engine.T.Waiters(c.parent, channel) }

// subscriptionLinger is how long a subscription nobody waits on lingers.
var subscriptionLinger = engine.T.SubscriptionLinger

// fallbacks counts the calls of Metrics.WaitFallback.
func fallbacks(n *atomic.Int64) redisync.Option {
	return redisync.WithMetrics(redisync.Metrics{WaitFallback: func(string, string) { n.Add(1) }})
}

// awaitGoWaiting waits until a waiter of c listens on the Redisson channel.
func awaitGoWaiting(t testing.TB, c *Client, channel string) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool { return redissonWaiters(c, channel) > 0 },
		"no waiter of the Client listens on %s", channel)
}

// subscribersByKind counts the classic and the sharded subscribers of a
// channel on the env's masters.
func subscribersByKind(t testing.TB, e *env, channel string) (classic, sharded int) {
	t.Helper()
	for _, s := range e.Masters() {
		for _, cmd := range []string{"NUMSUB", "SHARDNUMSUB"} {
			out, err := s.Do("PUBSUB", cmd, channel)
			require.NoError(t, err)
			f := strings.Fields(out)
			require.NotEmpty(t, f, "PUBSUB %s %s", cmd, channel)
			n, err := strconv.Atoi(f[len(f)-1])
			require.NoError(t, err)
			if cmd == "NUMSUB" {
				classic += n
			} else {
				sharded += n
			}
		}
	}
	return classic, sharded
}

// javaHolder makes name a Redisson lock hash with the fields and values
// given, for d: a holder in another process that never releases it, and
// publishes nothing.
func javaHolder(t testing.TB, ctx context.Context, rc rueidis.Client, name string, d time.Duration, fieldValues ...string) {
	t.Helper()
	hset := rc.B().Hset().Key(name).FieldValue()
	for i := 0; i+1 < len(fieldValues); i += 2 {
		hset = hset.FieldValue(fieldValues[i], fieldValues[i+1])
	}
	require.NoError(t, rc.Do(ctx, hset.Build()).Error())
	require.NoError(t, rc.Do(ctx, rc.B().Pexpire().Key(name).Milliseconds(d.Milliseconds()).Build()).Error())
}

// silentDel deletes key without a message, as a release whose message was
// lost.
func silentDel(t testing.TB, ctx context.Context, rc rueidis.Client, key string) time.Time {
	t.Helper()
	require.NoError(t, rc.Do(ctx, rc.B().Del().Key(key).Build()).Error())
	return time.Now()
}

// withinPasses waits for a waiter's outcome after a release whose message
// was lost: it comes within a presence pass or so of its Client (a second
// by default), long before the holder's lease of a minute or the fallback
// timer.
func withinPasses(t testing.TB, done <-chan error, released time.Time, what string) {
	t.Helper()
	select {
	case err := <-done:
		require.NoError(t, err, what)
		t.Logf("%s: %v after the silent release", what, time.Since(released).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatalf("%s still waits after several presence passes", what)
	}
}

// lockThenUnlock runs lock and unlocks what it got, reporting the error.
func lockThenUnlock(ctx context.Context, lock func(context.Context) (*redisync.Lease, error)) <-chan error {
	done := make(chan error, 1)
	go func() {
		l, err := lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		done <- err
	}()
	return done
}

// javaField is a Redisson holder's field: UUID:THREADID.
func javaField() string { return uuid.NewString() + ":1" }

// TestRedissonLockWithoutMessageFoundAtNextPass: an RLock released without
// a message (deleted) goes to the Go waiter at its Client's next presence
// pass, not at the end of the holder's lease of a minute; no fallback ends
// its wait.
func TestRedissonLockWithoutMessageFoundAtNextPass(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		rc := e.RueidisClient(t)
		var fell atomic.Int64
		c := e.client(t, fallbacks(&fell))
		name := "rsilent-" + e.Name
		javaHolder(t, ctx, rc, name, time.Minute, javaField(), "1")
		rl := c.Lock(name)
		done := lockThenUnlock(ctx, rl.Lock)
		awaitGoWaiting(t, c, rl.keys.Channel)
		time.Sleep(100 * time.Millisecond) // waiting
		withinPasses(t, done, silentDel(t, ctx, rc, name), "the RLock waiter")
		require.Zero(t, fell.Load(), "waits ended by the fallback")
	})
}

// TestRedissonLockHolderLeaseRunsOut: a Java holder that dies publishes
// nothing; the Go waiter takes the lock when its lease runs out, as the
// attempt found it, not a pass or a poll later.
func TestRedissonLockHolderLeaseRunsOut(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		rc := e.RueidisClient(t)
		var fell atomic.Int64
		c := e.client(t, fallbacks(&fell))
		name := "rdied-" + e.Name
		const lease = 1500 * time.Millisecond
		javaHolder(t, ctx, rc, name, lease, javaField(), "1")
		expires := time.Now().Add(lease)
		l, err := c.Lock(name).Lock(ctx)
		require.NoError(t, err)
		late := time.Since(expires)
		t.Logf("the waiter took the lock %v after the holder's lease ran out", late.Round(time.Millisecond))
		require.Less(t, late, 900*time.Millisecond, "taken at the end of the lease, not at a later pass")
		require.NoError(t, l.Unlock(ctx))
		require.Zero(t, fell.Load(), "waits ended by the fallback")
	})
}

// TestRedissonFairLockWithoutMessageFoundAtNextPass: the queued Go waiter
// of an RFairLock released without a message (deleted) takes it at its
// Client's next presence pass.
func TestRedissonFairLockWithoutMessageFoundAtNextPass(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		rc := e.RueidisClient(t)
		var fell atomic.Int64
		c := e.client(t, fallbacks(&fell))
		name := "rfsilent-" + e.Name
		javaHolder(t, ctx, rc, name, time.Minute, javaField(), "1")
		fl := c.FairLock(name)
		done := lockThenUnlock(ctx, fl.Lock)
		var head string
		eventually(t, 10*time.Second, func() bool {
			head, _ = rc.Do(ctx, rc.B().Lindex().Key(fl.keys.Queue).Index(0).Build()).ToString()
			return head != ""
		}, "the Go waiter did not queue")
		awaitGoWaiting(t, c, fl.keys.Channel+":"+head)
		time.Sleep(100 * time.Millisecond) // waiting
		withinPasses(t, done, silentDel(t, ctx, rc, name), "the fair lock waiter")
		require.Zero(t, fell.Load(), "waits ended by the fallback")
	})
}

// TestRedissonRWWithoutMessageFoundAtNextPass: a Go reader waiting for a
// Java writer, and a Go writer waiting for a Java reader, of an
// RReadWriteLock released without a message (deleted), take it at their
// Client's next presence pass.
func TestRedissonRWWithoutMessageFoundAtNextPass(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		rc := e.RueidisClient(t)
		var fell atomic.Int64
		c := e.client(t, fallbacks(&fell))
		name := "rwsilent-" + e.Name
		rw := c.ReadWriteLock(name)
		for _, side := range []struct {
			what   string
			holder []string
			lock   func(context.Context) (*redisync.Lease, error)
		}{
			{"the reader", []string{"mode", "write", javaField() + redissonWriteSuffix, "1"}, rw.RLock},
			{"the writer", []string{"mode", "read", javaField(), "1"}, rw.Lock},
		} {
			javaHolder(t, ctx, rc, name, time.Minute, side.holder...)
			done := lockThenUnlock(ctx, side.lock)
			awaitGoWaiting(t, c, rw.keys.Channel)
			time.Sleep(100 * time.Millisecond) // waiting
			withinPasses(t, done, silentDel(t, ctx, rc, name), side.what)
		}
		require.Zero(t, fell.Load(), "waits ended by the fallback")
	})
}

// TestRedissonSemaphoreWithoutMessageFoundAtNextPass: a Go waiter for the
// permits of an RSemaphore never set gets them at its Client's next
// presence pass once they are set without a message.
func TestRedissonSemaphoreWithoutMessageFoundAtNextPass(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		rc := e.RueidisClient(t)
		var fell atomic.Int64
		c := e.client(t, fallbacks(&fell))
		name := "rssilent-" + e.Name
		s := c.Semaphore(name)
		done := lockThenUnlock(ctx, func(ctx context.Context) (*redisync.Lease, error) { return s.Lock(ctx, 2) })
		awaitGoWaiting(t, c, s.channel())
		time.Sleep(100 * time.Millisecond) // waiting
		// Too few permits first: the waiter looks and waits on.
		require.NoError(t, rc.Do(ctx, rc.B().Set().Key(name).Value("1").Build()).Error())
		time.Sleep(1500 * time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("the waiter got 2 permits of 1: %v", err)
		default:
		}
		require.NoError(t, rc.Do(ctx, rc.B().Set().Key(name).Value("2").Build()).Error())
		withinPasses(t, done, time.Now(), "the semaphore waiter")
		require.Zero(t, fell.Load(), "waits ended by the fallback")
		n, err := s.AvailablePermits(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "the permits given back")
	})
}

// TestRedissonPermitExpirableSemaphoreWithoutMessageFoundAtNextPass: a Go
// waiter of an RPermitExpirableSemaphore whose permits were set without a
// message takes one at its Client's next presence pass.
func TestRedissonPermitExpirableSemaphoreWithoutMessageFoundAtNextPass(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		rc := e.RueidisClient(t)
		var fell atomic.Int64
		c := e.client(t, fallbacks(&fell))
		name := "rpsilent-" + e.Name
		s := c.PermitExpirableSemaphore(name)
		done := lockThenUnlock(ctx, func(ctx context.Context) (*redisync.Lease, error) { return s.Lock(ctx, 1) })
		awaitGoWaiting(t, c, redissonPSemKeys(name)[2])
		time.Sleep(100 * time.Millisecond) // waiting
		require.NoError(t, rc.Do(ctx, rc.B().Set().Key(name).Value("1").Build()).Error())
		withinPasses(t, done, time.Now(), "the permit expirable semaphore waiter")
		require.Zero(t, fell.Load(), "waits ended by the fallback")
		n, err := s.AvailablePermits(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "the permit given back")
	})
}

// TestRedissonCountDownLatchWithoutMessageFoundAtNextPass: Go waiters of an
// RCountDownLatch that opened without a message (deleted) return at their
// Client's next presence pass.
func TestRedissonCountDownLatchWithoutMessageFoundAtNextPass(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		rc := e.RueidisClient(t)
		var fell atomic.Int64
		c := e.client(t, fallbacks(&fell))
		name := "rlsilent-" + e.Name
		l := c.CountDownLatch(name)
		ok, err := l.TrySetCount(ctx, 2)
		require.NoError(t, err)
		require.True(t, ok)
		const waiters = 3
		done := make(chan error, waiters)
		for range waiters {
			go func() { done <- l.Wait(ctx) }()
		}
		eventually(t, 10*time.Second, func() bool { return redissonWaiters(c, l.channel()) == waiters }, "the waiters did not wait")
		time.Sleep(100 * time.Millisecond) // waiting
		opened := silentDel(t, ctx, rc, name)
		for range waiters {
			withinPasses(t, done, opened, "a latch waiter")
		}
		require.Zero(t, fell.Load(), "waits ended by the fallback")
	})
}

// TestRedissonWaitersShareOneSubscription: goroutines of one Client
// waiting on one Redisson lock, semaphore or latch listen through one
// subscription of the Client per kind of pub/sub (classic and sharded,
// where the server has both: Redisson's publishers may use either), not
// one connection each; it outlives the last waiter for the
// subscription linger, then goes.
func TestRedissonWaitersShareOneSubscription(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const perName = 8
		ctx := withTimeout(t, time.Minute)
		rc := e.RueidisClient(t)
		c := e.client(t)
		name := "rshare-" + e.Name
		lockName, rwName, semName, latchName := name+"-lock", name+"-rw", name+"-sem", name+"-latch"
		javaHolder(t, ctx, rc, lockName, time.Minute, javaField(), "1")
		javaHolder(t, ctx, rc, rwName, time.Minute, "mode", "write", javaField()+redissonWriteSuffix, "1")
		latch := c.CountDownLatch(latchName)
		ok, err := latch.TrySetCount(ctx, 1)
		require.NoError(t, err)
		require.True(t, ok)
		rl, rw, sem := c.Lock(lockName), c.ReadWriteLock(rwName), c.Semaphore(semName)
		channels := []string{rl.keys.Channel, rw.keys.Channel, sem.channel(), latch.channel()}

		waits := []func(context.Context) error{
			func(ctx context.Context) error { return unlocked(rl.Lock(ctx)) },
			func(ctx context.Context) error { return unlocked(rw.RLock(ctx)) },
			func(ctx context.Context) error { return unlocked(sem.Lock(ctx, 1)) },
			latch.Wait,
		}
		wctx, cancel := context.WithCancel(ctx)
		goroutines := runtime.NumGoroutine()
		var wg sync.WaitGroup
		defer func() {
			cancel()
			wg.Wait()
		}()
		for i := range 4 * perName {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := waits[i%4](wctx); err != nil && wctx.Err() == nil {
					t.Error(err)
				}
			}()
		}
		for _, ch := range channels {
			eventually(t, 10*time.Second, func() bool { return redissonWaiters(c, ch) == perName }, "%d waiters on %s", perName, ch)
		}
		time.Sleep(100 * time.Millisecond) // every waiter settled
		for _, ch := range channels {
			classic, sharded := subscribersByKind(t, e, ch)
			require.Equal(t, 1, classic, "classic subscribers of %s", ch)
			require.Equal(t, 1, sharded, "sharded subscribers of %s", ch)
		}
		extra := runtime.NumGoroutine() - goroutines - 4*perName
		t.Logf("%s: %d waiters on 4 channels: %d goroutines beyond them", e.Name, 4*perName, extra)
		require.LessOrEqual(t, extra, 10+4*len(e.Masters()), "goroutines beyond the waiters: a connection each?")

		// Released with messages: every waiter gets through, and leaves.
		found, err := rl.ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, found)
		found, err = rw.ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, found)
		_, err = sem.AddPermits(ctx, 1)
		require.NoError(t, err)
		_, err = latch.CountDown(ctx)
		require.NoError(t, err)
		wg.Wait()
		left := time.Now()
		for _, ch := range channels {
			require.Zero(t, redissonWaiters(c, ch), "waiters left on %s", ch)
		}
		for _, ch := range channels {
			eventually(t, subscriptionLinger+5*time.Second, func() bool { return subscribers(t, e, ch) == 0 },
				"the subscription to %s outlives its waiters", ch)
		}
		gone := time.Since(left)
		t.Logf("%s: the subscriptions went %v after the last waiter left", e.Name, gone.Round(time.Millisecond))
		require.Greater(t, gone, subscriptionLinger/2, "kept for the subscription linger")
	})
}

// unlocked unlocks what an acquisition got, and returns its error.
func unlocked(l *redisync.Lease, err error) error {
	if err != nil {
		return err
	}
	return l.Unlock(context.Background())
}

// TestRedissonWaitersLeaveTheirSubscription: a Redisson waiter leaves the
// Client's subscription whether its ctx ends or its Client closes, and
// nothing of the waiting is left running.
func TestRedissonWaitersLeaveTheirSubscription(t *testing.T) {
	e := standaloneEnv(t)
	ctx := withTimeout(t, time.Minute)
	rc := e.RueidisClient(t)
	check := leakCheck(t)
	c := e.client(t)
	name := "rleave"
	javaHolder(t, ctx, rc, name, time.Minute, javaField(), "1")
	rl := c.Lock(name)

	wctx, cancel := context.WithCancel(ctx)
	const waiters = 4
	done := make(chan error, 2*waiters)
	for range waiters {
		go func() { done <- unlocked(rl.Lock(wctx)) }()
	}
	eventually(t, 10*time.Second, func() bool { return redissonWaiters(c, rl.keys.Channel) == waiters }, "the waiters did not wait")
	cancel()
	for range waiters {
		require.ErrorIs(t, <-done, context.Canceled)
	}
	require.Zero(t, redissonWaiters(c, rl.keys.Channel))
	eventually(t, subscriptionLinger+5*time.Second, func() bool { return subscribers(t, e, rl.keys.Channel) == 0 },
		"the subscription outlives the waiters whose ctx ended")

	for range waiters {
		go func() { done <- unlocked(rl.Lock(ctx)) }()
	}
	eventually(t, 10*time.Second, func() bool { return redissonWaiters(c, rl.keys.Channel) == waiters }, "the waiters did not wait")
	check([]*Client{c})
	for range waiters {
		require.ErrorIs(t, <-done, redisync.ErrClosed)
	}
	require.Zero(t, subscribers(t, e, rl.keys.Channel), "subscribed after Close")
	require.NoError(t, rc.Do(ctx, rc.B().Del().Key(name).Build()).Error())
}

// TestRedissonIdleWaitingCostsLittle: goroutines of one Client waiting on a
// Redisson lock another process holds cost one read of the lock per
// presence pass, not an attempt per waiter and second (before, 150 over
// the window).
func TestRedissonIdleWaitingCostsLittle(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const waiters = 50
		ctx, cancel := context.WithCancel(withTimeout(t, time.Minute))
		defer cancel()
		rc := e.RueidisClient(t)
		c := e.client(t)
		name := "ridle-" + e.Name
		javaHolder(t, ctx, rc, name, time.Minute, javaField(), "1")
		rl := c.Lock(name)
		var wg sync.WaitGroup
		for range waiters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := unlocked(rl.Lock(ctx)); err != nil && ctx.Err() == nil {
					t.Errorf("waiting: %v", err)
				}
			}()
		}
		eventually(t, 10*time.Second, func() bool { return redissonWaiters(c, rl.keys.Channel) == waiters }, "the waiters did not wait")
		time.Sleep(500 * time.Millisecond) // every waiter settled
		before := e.CommandCalls(t)
		const window = 3 * time.Second
		time.Sleep(window)
		after := e.CommandCalls(t)
		d := make(map[string]int64)
		for name, n := range after {
			if n -= before[name]; n != 0 && name != "info" {
				d[name] = n
			}
		}
		t.Logf("%s: %d waiters on one RLock over %v: %v", e.Name, waiters, window, d)
		// One look of every waiter at most, after the first read of the
		// subscription's probe, which has nothing to compare with; none
		// after that.
		require.LessOrEqual(t, d["evalsha"]+d["eval"], int64(waiters+3), "attempts while waiting: %v", d)
		require.LessOrEqual(t, d["hrandfield"], int64(6), "probes while waiting: %v", d)
		cancel()
		wg.Wait()
		require.NoError(t, rc.Do(context.Background(), rc.B().Del().Key(name).Build()).Error())
	})
}

// TestRedissonOneMessageWakesEveryLocalWaiter: one release message of a
// Redisson semaphore reaches every goroutine of the Client that waits for
// it: it wakes them by generation, so none takes another's wake-up. The
// Client's presence pass is stalled meanwhile: only the message can end
// the waits.
func TestRedissonOneMessageWakesEveryLocalWaiter(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		rc := e.RueidisClient(t)
		c := e.client(t)
		name := "rsmany-" + t.Name()
		s := c.Semaphore(name)
		t.Cleanup(func() { rc.Do(context.Background(), rc.B().Del().Key(name).Build()) })
		const waiters = 3
		got := make(chan *redisync.Lease, waiters)
		for range waiters {
			go func() {
				l, err := s.Lock(ctx, 1)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
		}
		eventually(t, 10*time.Second, func() bool { return redissonWaiters(c, s.channel()) == waiters }, "the waiters did not wait: %d", redissonWaiters(c, s.channel()))
		time.Sleep(100 * time.Millisecond) // waiting
		defer engine.T.StallPresence(c.parent)()
		// As Java's release(3) does: the permits, and one message.
		require.NoError(t, rc.Do(ctx, rc.B().Incrby().Key(name).Increment(waiters).Build()).Error())
		require.NoError(t, rc.Do(ctx, rc.B().Publish().Channel(s.channel()).Message(strconv.Itoa(waiters)).Build()).Error())
		var leases []*redisync.Lease
		for range waiters {
			select {
			case l := <-got:
				require.NotNil(t, l)
				leases = append(leases, l)
			case <-time.After(5 * time.Second):
				t.Fatalf("%d of %d waiters woken by one message", len(leases), waiters)
			}
		}
		for _, l := range leases {
			require.NoError(t, l.Unlock(ctx))
		}
	})
}
