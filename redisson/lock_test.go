package redisson

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/internal/engine"
	"github.com/redisync/redisync/internal/testenv"
)

// requireRedissonHeld checks that the Redisson lock is held by l's owner
// with holds holds, and returns its state.
func requireRedissonHeld(t testing.TB, rl *Lock, l *redisync.Lease, holds int) LockState {
	t.Helper()
	st, err := rl.Inspect(context.Background())
	require.NoError(t, err)
	require.True(t, st.Locked)
	require.Len(t, st.Holders, 1)
	require.Equal(t, ownerOf(l), st.Holders[0].Owner)
	require.Equal(t, holds, st.Holders[0].Holds)
	return st
}

func TestRedissonLockLockUnlock(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		name := "rlock-" + e.Name
		rl := c.Lock(name)
		l := mustLock(t, ctx, rl.Lock)
		st := requireRedissonHeld(t, rl, l, 1)
		require.Equal(t, c.ID(), st.Holders[0].ClientID(), "the field is UUID:THREADID with the Client's ID")
		require.Greater(t, st.TTL, 20*time.Second, "the watchdog lease, 30s")
		require.Zero(t, l.Token(), "a plain RLock has no token")

		// Re-entry through the lease's context: one more hold in one field.
		inner := mustLock(t, l.Context(), rl.Lock)
		requireRedissonHeld(t, rl, l, 2)

		other := e.client(t)
		_, err := other.Lock(name).TryLock(ctx)
		require.ErrorIs(t, err, redisync.ErrLocked)

		require.NoError(t, inner.Unlock(ctx))
		requireRedissonHeld(t, rl, l, 1)
		require.NoError(t, l.Unlock(ctx))
		require.ErrorIs(t, l.Unlock(ctx), redisync.ErrNotHeld)
		st, err = rl.Inspect(ctx)
		require.NoError(t, err)
		require.False(t, st.Locked)
		require.Empty(t, e.Keys(t, "redisson_unlock_latch:*"), "a released lock leaves no latch")

		ol := mustLock(t, ctx, other.Lock(name).TryLock)
		require.NoError(t, ol.Unlock(ctx))
	})
}

func TestRedissonFencedLockTokens(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		name := "rfenced-" + e.Name
		fl := c.FencedLock(name)
		var last uint64
		for range 3 {
			l := mustLock(t, ctx, fl.Lock)
			require.Greater(t, l.Token(), last, "tokens count up")
			last = l.Token()
			// A re-entry counts the token up too, as in Redisson, and shares
			// its ownership's.
			inner := mustLock(t, l.Context(), fl.Lock)
			require.Equal(t, l.Token(), inner.Token())
			st, err := fl.Inspect(ctx)
			require.NoError(t, err)
			require.Equal(t, last+1, st.Token)
			require.NoError(t, inner.Unlock(ctx))
			require.NoError(t, l.Unlock(ctx))
			last = st.Token
		}
		rc := e.RueidisClient(t)
		v, err := rc.Do(ctx, rc.B().Get().Key("redisson_lock_token:{"+name+"}").Build()).ToString()
		require.NoError(t, err)
		require.Equal(t, strconv.FormatUint(last, 10), v, "the counter is Redisson's")
	})
}

func TestRedissonLockWrongLayout(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		rc := e.RueidisClient(t)
		str, rw, fair := "rlock-string-"+e.Name, "rlock-rw-"+e.Name, "rlock-fair-"+e.Name
		require.NoError(t, rc.Do(ctx, rc.B().Set().Key(str).Value("5").Build()).Error())
		require.NoError(t, rc.Do(ctx, rc.B().Hset().Key(rw).FieldValue().FieldValue("mode", "read").FieldValue("x:1", "1").Build()).Error())
		// A Redisson fair lock, free, with a waiter queued: an RLock would
		// jump the queue.
		require.NoError(t, rc.Do(ctx, rc.B().Rpush().Key("redisson_lock_queue:{"+fair+"}").Element("x:1").Build()).Error())
		_, err := c.Lock(fair).TryLock(ctx)
		require.ErrorIs(t, err, redisync.ErrWrongType)
		n, err := rc.Do(ctx, rc.B().Exists().Key(fair).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, n, "not taken")
		for _, name := range []string{str, rw} {
			_, err := c.Lock(name).TryLock(ctx)
			require.ErrorIs(t, err, redisync.ErrWrongType, name)
			_, err = c.Lock(name).Lock(ctx)
			require.ErrorIs(t, err, redisync.ErrWrongType, name)
			_, err = c.Lock(name).ForceUnlock(ctx)
			require.ErrorIs(t, err, redisync.ErrWrongType, name)
			_, err = c.Lock(name).Inspect(ctx)
			require.ErrorIs(t, err, redisync.ErrWrongType, name)
		}
		v, err := rc.Do(ctx, rc.B().Get().Key(str).Build()).ToString()
		require.NoError(t, err)
		require.Equal(t, "5", v, "left alone")
		n, err = rc.Do(ctx, rc.B().Hlen().Key(rw).Build()).AsInt64()
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "left alone")
	})
}

func TestRedissonLockContention(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		name := "rlock-contended-" + e.Name
		locks := onClients(t, e, 3, func(c *Client) *Lock { return c.Lock(name) })
		var (
			mu      sync.Mutex
			inside  int
			overlap int
			count   int
			wg      sync.WaitGroup
		)
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					l, err := locks[i%3].Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					inside++
					if inside > 1 {
						overlap++
					}
					n := count
					mu.Unlock()
					time.Sleep(100 * time.Microsecond)
					mu.Lock()
					count = n + 1
					inside--
					mu.Unlock()
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		require.Zero(t, overlap)
		require.Equal(t, 12*20, count, "no lost update")
	})
}

// TestRedissonWaitEndedNamesTheLock: a Redisson wait whose ctx ends while
// the thing is taken returns an error that names it and matches ctx's
// error and the error a single attempt gives (redisync.ErrLocked;
// redisync.ErrNoPermits, which matches it, for the semaphores; ctx's
// error alone for a latch); a lock's names the holder too.
func TestRedissonWaitEndedNamesTheLock(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		r := e.client(t)
		base := "rwait-ended-" + e.Name
		// Held until the Client closes.
		held := mustLock(t, ctx, r.Lock(base+"-lock").Lock)
		heldFair := mustLock(t, ctx, r.FairLock(base+"-fair").Lock)
		heldRW := mustLock(t, ctx, r.ReadWriteLock(base+"-rw").Lock)
		sem := r.Semaphore(base + "-sem")
		psem := r.PermitExpirableSemaphore(base + "-psem")
		latch := r.CountDownLatch(base + "-latch")
		_, err := latch.TrySetCount(ctx, 1)
		require.NoError(t, err)
		t.Cleanup(func() { latch.CountDown(context.Background()) })

		testenv.RequireWaitsEnd(t, ctx, redisync.ErrLocked, []testenv.WaitCase{
			{Name: base + "-lock", Busy: redisync.ErrLocked, Wait: func(ctx context.Context) error { return unlocked(r.Lock(base + "-lock").Lock(ctx)) }},
			{Name: base + "-fair", Busy: redisync.ErrLocked, Wait: func(ctx context.Context) error { return unlocked(r.FairLock(base + "-fair").Lock(ctx)) }},
			{Name: base + "-rw", Busy: redisync.ErrLocked, Wait: func(ctx context.Context) error { return unlocked(r.ReadWriteLock(base + "-rw").RLock(ctx)) }},
			{Name: base + "-sem", Busy: redisync.ErrNoPermits, Wait: func(ctx context.Context) error { return unlocked(sem.Lock(ctx, 1)) }},
			{Name: base + "-psem", Busy: redisync.ErrNoPermits, Wait: func(ctx context.Context) error { return unlocked(psem.Lock(ctx, 1)) }},
			{Name: base + "-latch", Busy: nil, Wait: latch.Wait},
		})
		// A lock's error names the holder its last attempt saw.
		for _, h := range []struct {
			held *redisync.Lease
			lock func(context.Context) (*redisync.Lease, error)
		}{
			{held, r.Lock(base + "-lock").Lock},
			{heldFair, r.FairLock(base + "-fair").Lock},
			{heldRW, r.ReadWriteLock(base + "-rw").RLock},
			{heldRW, r.ReadWriteLock(base + "-rw").Lock},
		} {
			dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			_, err = h.lock(dctx)
			cancel()
			require.ErrorContains(t, err, "(held by "+Owner(h.held)+")")
		}

		_, err = r.Lock(base + "-lock").TryLock(ctx)
		require.ErrorIs(t, err, redisync.ErrLocked)
		require.NotErrorIs(t, err, context.DeadlineExceeded)
	})
}

// TestRedissonOwner: Owner gives the field of the Redisson hash that a
// Lease holds by, as Inspect shows it, for every lock kind and side, the
// same for a re-entry and after Unlock; "" where a Lease holds no field.
func TestRedissonOwner(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		r := e.client(t)
		base := "rowner-" + e.Name
		fieldOf := func(st LockState) string {
			require.Len(t, st.Holders, 1)
			return st.Holders[0].Owner
		}
		for _, lk := range []struct {
			name    string
			lock    func(context.Context) (*redisync.Lease, error)
			inspect func(context.Context) (LockState, error)
		}{
			{"lock", r.Lock(base + "-lock").Lock, r.Lock(base + "-lock").Inspect},
			{"fenced", r.FencedLock(base + "-fenced").Lock, r.FencedLock(base + "-fenced").Inspect},
			{"fair", r.FairLock(base + "-fair").Lock, r.FairLock(base + "-fair").Inspect},
		} {
			l := mustLock(t, ctx, lk.lock)
			st, err := lk.inspect(ctx)
			require.NoError(t, err)
			require.Equal(t, fieldOf(st), Owner(l), lk.name)
			require.Equal(t, r.ID(), st.Holders[0].ClientID(), lk.name)
			inner := mustLock(t, l.Context(), lk.lock)
			require.Equal(t, Owner(l), Owner(inner), "%s: a re-entry holds by its outer Lease's field", lk.name)
			require.NoError(t, inner.Unlock(ctx))
			require.NoError(t, l.Unlock(ctx))
			require.Equal(t, fieldOf(st), Owner(l), "%s: the same once ended", lk.name)
		}

		rw := r.ReadWriteLock(base + "-rw")
		rl := mustLock(t, ctx, rw.RLock)
		st, err := rw.Inspect(ctx)
		require.NoError(t, err)
		require.Len(t, st.Readers, 1)
		require.Equal(t, st.Readers[0].Owner, Owner(rl))
		require.NoError(t, rl.Unlock(ctx))
		wl := mustLock(t, ctx, rw.Lock)
		st, err = rw.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, st.Writer.Owner, Owner(wl))
		require.True(t, strings.HasSuffix(Owner(wl), ":write"))
		require.Equal(t, r.ID(), st.Writer.ClientID())
		require.NoError(t, wl.Unlock(ctx))

		sem := r.Semaphore(base + "-sem")
		_, err = sem.AddPermits(ctx, 1)
		require.NoError(t, err)
		sl, err := sem.Lock(ctx, 1)
		require.NoError(t, err)
		require.Empty(t, Owner(sl), "a semaphore's permits are nobody's field")
		require.NoError(t, sl.Unlock(ctx))
		require.Empty(t, Owner(nil))
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		failed := <-r.Lock(base + "-lock").Acquire(cctx)
		require.Error(t, failed.Err())
		require.Empty(t, Owner(failed), "a failed acquisition holds no field")
	})
}

// TestRedissonNarrowPubSubWarnsOncePerName: a handle that publishes one way
// alone (WithPubSub) on servers that have both kinds of pub/sub is logged at
// WARN once per name, naming the waiters it cannot reach, and counted in
// Metrics.PublishedOneWay at every operation; the default is neither.
func TestRedissonNarrowPubSubWarnsOncePerName(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		logs := &testenv.LogBuffer{}
		var mu sync.Mutex
		oneWay := map[string]int{}
		r := e.client(t, redisync.WithLogger(slog.New(slog.NewTextHandler(logs, nil))), redisync.WithMetrics(redisync.Metrics{
			PublishedOneWay: func(name string) {
				mu.Lock()
				defer mu.Unlock()
				oneWay[name]++
			},
		}))
		base := "rnarrow-" + e.Name
		for range 2 {
			require.NoError(t, mustLock(t, ctx, r.Lock(base+"-classic", WithPubSub(PubSubClassic)).Lock).Unlock(ctx))
		}
		require.NoError(t, mustLock(t, ctx, r.Lock(base+"-sharded", WithPubSub(PubSubSharded)).Lock).Unlock(ctx))
		require.NoError(t, mustLock(t, ctx, r.Lock(base+"-auto").Lock).Unlock(ctx))
		out := logs.String()
		t.Log(out)
		require.Equal(t, 2, strings.Count(out, "level=WARN"), "one warning per name that publishes one way")
		require.Regexp(t, `classic pub/sub \(PUBLISH\) alone.*waiters that subscribe sharded.*name=`+base+`-classic\n`, out)
		require.Regexp(t, `sharded pub/sub \(SPUBLISH\) alone.*waiters that subscribe classically.*name=`+base+`-sharded\n`, out)
		require.NotContains(t, out, base+"-auto")
		// Counted every time, not once per name: a lock and a force unlock.
		_, err := r.Lock(base+"-sharded", WithPubSub(PubSubSharded)).ForceUnlock(ctx)
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[string]int{base + "-classic": 2, base + "-sharded": 2}, oneWay)
	})
}

// TestRedissonRenewedLease: WithRenewedLease gives a handle's Leases a
// lease the watchdog renews in place of the Client's watchdog lease (30 s
// here): the keys expire within it, stay held while the holder lives, and
// a handle's option overrides the Client's WithLeaseTime.
func TestRedissonRenewedLease(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		const d = 900 * time.Millisecond
		c := e.client(t)
		r := New(c.parent, WithLeaseTime(5*time.Second)) // overridden by each handle
		rc := e.RueidisClient(t)
		base := "rrenewed-" + e.Name
		psem := r.PermitExpirableSemaphore(base+"-psem", WithRenewedLease(d))
		_, err := psem.TrySetPermits(ctx, 1)
		require.NoError(t, err)
		leases := []struct {
			key string
			l   *redisync.Lease
		}{
			{base + "-lock", mustLock(t, ctx, r.Lock(base+"-lock", WithRenewedLease(d)).Lock)},
			{base + "-fair", mustLock(t, ctx, r.FairLock(base+"-fair", WithRenewedLease(d)).Lock)},
			{base + "-rw", mustLock(t, ctx, r.ReadWriteLock(base+"-rw", WithRenewedLease(d)).Lock)},
			{"{" + base + "-psem}:timeout", mustLock(t, ctx, func(ctx context.Context) (*redisync.Lease, error) { return psem.Lock(ctx, 1) })},
		}
		for range 3 {
			time.Sleep(d)
			for _, h := range leases {
				require.NoError(t, h.l.Err(), h.key)
				if h.key == "{"+base+"-psem}:timeout" {
					continue // the permits' zset never expires; their scores move
				}
				pttl, err := rc.Do(ctx, rc.B().Pttl().Key(h.key).Build()).AsInt64()
				require.NoError(t, err)
				require.Greater(t, pttl, int64(0), "%s still held", h.key)
				require.LessOrEqual(t, pttl, d.Milliseconds(), "%s has the handle's lease, not the Client's", h.key)
			}
		}
		for _, h := range leases {
			require.NoError(t, h.l.Unlock(ctx), h.key)
		}
		_, err = r.Lock(base+"-bad", WithRenewedLease(0)).TryLock(ctx)
		require.ErrorIs(t, err, redisync.ErrInvalidArgument)
	})
}

// TestRedissonRenewedLeaseHolderDies: a holder cut off from Redis keeps a
// lock with WithRenewedLease(d) about d, not the Client's watchdog lease:
// another Client gets it then.
func TestRedissonRenewedLeaseHolderDies(t *testing.T) {
	e := standaloneEnv(t)
	ctx := withTimeout(t, time.Minute)
	const d = 900 * time.Millisecond
	a, p := e.proxied(t)
	b := e.client(t)
	name := "rrenewed-dies"
	l := mustLock(t, ctx, a.Lock(name, WithRenewedLease(d)).Lock)
	p.Blackhole()
	cut := time.Now()
	got := mustLock(t, ctx, b.Lock(name).Lock)
	took := time.Since(cut)
	t.Logf("the other Client got the lock %v after the holder was cut off", took.Round(time.Millisecond))
	require.Less(t, took, 3*d, "the holder's renewed lease, not the Client's watchdog lease")
	require.NoError(t, got.Unlock(ctx))
	p.Heal()
	<-l.Lost()
}

// TestTryLockWithLostReplyTakesNothing: a TryLock (of a Lock, a
// FencedLock, a FairLock, a ReadWriteLock's write and read locks) whose script took the lock but
// whose reply was lost on the connection returns the connection's error
// and leaves nothing held: no attempt follows to learn the outcome, so
// what the script may have taken is given back, and another Client takes
// the lock at once rather than when the lease of nobody's hold runs out.
func TestTryLockWithLostReplyTakesNothing(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		c, rf := e.faultyClient(t, redisync.WithWatchdogLease(20*time.Second))
		other := e.client(t)
		ctx := withTimeout(t, 30*time.Second)
		name := t.Name()
		for _, tc := range []struct {
			what   string
			script engine.Script
			try    func() error
			taken  func() error // another Client's TryLock
		}{
			{"lock", redissonLockScript,
				func() error { _, err := c.Lock(name + "-l").TryLock(ctx); return err },
				func() error { return tryUnlock(ctx, other.Lock(name+"-l").TryLock) }},
			{"fenced lock", redissonLockScript,
				func() error { _, err := c.FencedLock(name + "-fl").TryLock(ctx); return err },
				func() error { return tryUnlock(ctx, other.FencedLock(name+"-fl").TryLock) }},
			{"fair lock", redissonFairLockScript,
				func() error { _, err := c.FairLock(name + "-f").TryLock(ctx); return err },
				func() error { return tryUnlock(ctx, other.FairLock(name+"-f").TryLock) }},
			{"write lock", redissonRWWriteScript,
				func() error { _, err := c.ReadWriteLock(name + "-w").TryLock(ctx); return err },
				func() error { return tryUnlock(ctx, other.ReadWriteLock(name+"-w").TryLock) }},
			{"read lock", redissonRWReadScript,
				func() error { _, err := c.ReadWriteLock(name + "-r").TryRLock(ctx); return err },
				func() error { return tryUnlock(ctx, other.ReadWriteLock(name+"-r").TryLock) }},
		} {
			r := rf.Lose(runs(tc.script), 1, 0)
			require.ErrorIs(t, tc.try(), testenv.ErrReplyLost, tc.what)
			require.Equal(t, 1, r.Hits(), tc.what)
			require.NoError(t, tc.taken(), "%s: the lock its lost reply took is still held", tc.what)
		}
	})
}

// tryUnlock takes a lock with try and releases it.
func tryUnlock(ctx context.Context, try func(context.Context) (*redisync.Lease, error)) error {
	l, err := try(ctx)
	if err != nil {
		return err
	}
	return l.Unlock(ctx)
}

// TestLockGrantAfterItsContextReturnsWithinGrace: a Lock whose acquire
// reply comes after its context ended, within the grace, gives the lock
// back, and returns at most the grace (and a margin) after the context
// ended even while the release's own reply is held back; the lock is free
// once the release answered.
func TestLockGrantAfterItsContextReturnsWithinGrace(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		c, rf := e.faultyClient(t)
		other := e.client(t)
		name := t.Name()
		rf.Hold(runs(redissonLockScript), 1, 300*time.Millisecond)
		released := rf.Hold(func(cmd []string) bool {
			return runs(redissonUnlockScript)(cmd) || runs(redissonReleaseScript)(cmd)
		}, 1, 3*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		ended, _ := ctx.Deadline()
		_, err := c.Lock(name).Lock(ctx)
		returned := time.Now()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		select {
		case <-released.Ran():
		default:
			t.Fatal("the lock the late reply took was not given back")
		}
		t.Logf("Lock returned %v after its context ended", returned.Sub(ended).Round(time.Millisecond))
		require.Less(t, returned.Sub(ended), time.Second, "Lock waited for the give-back past its grace")
		lctx, lcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer lcancel()
		require.NoError(t, tryUnlockEventually(lctx, other.Lock(name).TryLock), "the lock was not given back")
	})
}

// TestLockUnconfirmedGrantReturnsWithinGrace: a Lock whose acquire reply
// came late (a third of its lease or more after it was sent) confirms the
// grant with a renewal before it delivers the Lease. When no renewal
// answers, it gives up at the grace after its context ended and gives the
// hold back, in the background: it returns within the grace (and a
// margin) while that release's own reply is held back, and the lock is
// free once the release answered. Lock, FairLock and ReadWriteLock's write
// lock.
func TestLockUnconfirmedGrantReturnsWithinGrace(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		c, rf := e.faultyClient(t)
		other := e.client(t)
		name := t.Name()
		lease := WithRenewedLease(600 * time.Millisecond)
		for _, tc := range []struct {
			what                   string
			acquire, renew, unlock engine.Script
			lock                   func(context.Context) error
			other                  func(context.Context) (*redisync.Lease, error) // another Client's TryLock
		}{
			{"lock", redissonLockScript, redissonRenewScript, redissonUnlockScript,
				func(ctx context.Context) error { _, err := c.Lock(name+"-l", lease).Lock(ctx); return err },
				other.Lock(name + "-l").TryLock},
			{"fair lock", redissonFairLockScript, redissonRenewScript, redissonFairUnlockScript,
				func(ctx context.Context) error { _, err := c.FairLock(name+"-f", lease).Lock(ctx); return err },
				other.FairLock(name + "-f").TryLock},
			{"write lock", redissonRWWriteScript, redissonRWRenewScript, redissonRWUnlockScript,
				func(ctx context.Context) error { _, err := c.ReadWriteLock(name+"-w", lease).Lock(ctx); return err },
				other.ReadWriteLock(name + "-w").TryLock},
		} {
			late := rf.Hold(runs(tc.acquire), 1, 300*time.Millisecond)
			unconfirmed := rf.Lose(runs(tc.renew), -1, 0)
			released := rf.Hold(runs(tc.unlock), 1, 3*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
			ended, _ := ctx.Deadline()
			err := tc.lock(ctx)
			returned := time.Now()
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded, tc.what)
			require.Equal(t, 1, late.Hits(), tc.what)
			require.Positive(t, unconfirmed.Hits(), "%s: the late grant was not confirmed", tc.what)
			t.Logf("%s: Lock returned %v after its context ended", tc.what, returned.Sub(ended).Round(time.Millisecond))
			require.Less(t, returned.Sub(ended), 2*time.Second, "%s: Lock waited for the give-back past its grace", tc.what)
			rf.Drop(unconfirmed)
			lctx, lcancel := context.WithTimeout(context.Background(), 10*time.Second)
			<-released.Ran()
			require.NoError(t, tryUnlockEventually(lctx, tc.other), "%s: the hold was not given back", tc.what)
			lcancel()
		}
	})
}

// tryUnlockEventually takes a lock with try, retrying until ctx ends, and
// releases it.
func tryUnlockEventually(ctx context.Context, try func(context.Context) (*redisync.Lease, error)) error {
	for {
		err := tryUnlock(ctx, try)
		if err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
