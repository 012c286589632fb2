package redisync

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestUnlockAfterLocalPassLeavesTheSuccessorHolding: an Unlock that passes
// the lock on to a goroutine of its Client releases nothing in Redis,
// whether it passes from its reserved tokens or after asking Redis to keep
// the lock for its waiters (a budget of one pass): the successor holds the
// lock in Redis, is not reported lost, and another Client cannot take it.
func TestUnlockAfterLocalPassLeavesTheSuccessorHolding(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		for _, budget := range []int{DefaultLocalPasses, 1} {
			ctx := withTimeout(t, 30*time.Second)
			var passed atomic.Int64
			c := e.client(t, WithMetrics(Metrics{PassedOn: func(string, string, time.Duration) { passed.Add(1) }}))
			m := c.Mutex(t.Name()+"-"+time.Now().Format("150405.000000"), WithLocalPasses(budget, time.Minute))
			other := e.client(t).Mutex(m.Name())
			warm(t, ctx, m)
			l := mustLock(t, ctx, m.Lock)
			_, leases, _ := holdAndQueueFrom(t, ctx, m, l, 3)
			for i := range 3 {
				require.NoError(t, l.Unlock(ctx), "budget %d, pass %d", budget, i)
				nl := <-leases
				require.NoError(t, nl.Err(), "budget %d, pass %d", budget, i)
				requireHeldBy(t, m, nl)
				_, err := other.TryLock(ctx)
				require.ErrorIs(t, err, ErrLocked, "budget %d, pass %d: another Client took the lock passed on", budget, i)
				time.Sleep(20 * time.Millisecond)
				require.NoError(t, nl.Err(), "budget %d, pass %d: the successor lost its lock", budget, i)
				requireHeldBy(t, m, nl)
				l = nl
			}
			require.Equal(t, int64(3), passed.Load(), "budget %d", budget)
			require.NoError(t, l.Unlock(ctx))
			requireFree(t, m)
		}
	})
}

// TestLockHandedToAnIdleClientOutlivesItsClaim: a lock handed over to a
// waiter whose Client holds nothing else, its watchdog asleep with nothing
// to watch, is renewed before the short claim it came with ends, and stays
// the waiter's after it: the hand-over brings the sleeping watchdog's timer
// forward rather than waking it, and the renewal is not lost for it.
func TestLockHandedToAnIdleClientOutlivesItsClaim(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const lease = 2 * handOverClaim // the claim is the shorter
		ctx := withTimeout(t, 60*time.Second)
		name := t.Name() + "-" + time.Now().Format("150405.000000")
		holder := e.client(t).Mutex(name, WithLocalPasses(0, 0))
		wc := e.client(t, WithWatchdogLease(lease))
		waiter := wc.Mutex(name)
		// The waiter's Client holds another lock once: its watchdog runs,
		// and sleeps with nothing to watch once it looked again.
		ol := mustLock(t, ctx, wc.Mutex(name+"-other").Lock)
		require.NoError(t, ol.Unlock(ctx))
		time.Sleep(lease/3 + 200*time.Millisecond)

		hl := mustLock(t, ctx, holder.Lock)
		got := make(chan *Lease, 1)
		go func() {
			l, err := waiter.Lock(ctx)
			if err != nil {
				l = nil
			}
			got <- l
		}()
		eventually(t, 5*time.Second, func() bool {
			n, err := wc.rc.Do(ctx, wc.rc.B().Zcard().Key(waiter.keys.queue).Build()).AsInt64()
			return err == nil && n == 1
		}, "waiter did not queue")
		require.NoError(t, hl.Unlock(ctx))
		l := <-got
		require.NotNil(t, l, "the waiter did not get the lock")
		time.Sleep(handOverClaim + time.Second)
		require.NoError(t, l.Err(), "the lock handed over was lost after its claim")
		requireHeldBy(t, waiter, l)
		_, err := holder.TryLock(ctx)
		require.ErrorIs(t, err, ErrLocked, "another Client took the lock handed over after its claim")
		require.NoError(t, l.Unlock(ctx))
	})
}

// TestLateGrantIsConfirmed: a lock granted by a script whose reply came
// back after the key's lease had run out, while another Client took the
// lock, is not delivered: the late grant is confirmed by a renewal first,
// which finds the lock gone, and the acquisition goes on waiting. So with a
// watchdog lease and with a fixed one, which no watchdog renews.
func TestLateGrantIsConfirmed(t *testing.T) {
	const lease = 600 * time.Millisecond
	eachLeaseMode(t, lease, func(t *testing.T, e *env, rf *replyFaults, m *Mutex) {
		other := e.client(t).Mutex(t.Name(), WithLocalPasses(0, 0))
		ctx := withTimeout(t, 30*time.Second)

		r := rf.hold(runs(acquireScript), 1, 3*lease)
		got := make(chan *Lease, 1)
		go func() {
			lctx, cancel := context.WithTimeout(ctx, 6*lease)
			defer cancel()
			l, err := m.Lock(lctx)
			if err != nil {
				l = nil
			}
			got <- l
		}()
		<-r.Ran()
		// The grant's key expires while its reply is held back; the
		// other Client takes the lock and keeps it.
		ol := mustLock(t, ctx, other.Lock)
		st := requireHeldBy(t, other, ol)
		l := <-got
		if l != nil {
			now, err := other.Inspect(ctx)
			require.NoError(t, err)
			require.Failf(t, "a late grant was delivered", "lease of %s delivered (Err %v) while %s holds the lock (token %d, then %d)",
				l.h.owner, l.Err(), now.Owner, st.Token, now.Token)
		}
		require.NoError(t, ol.Err())
		require.NoError(t, ol.Unlock(ctx))
	})
}

// eachLeaseMode runs f, on standalone and on Cluster, with a Mutex of a
// Client made by faultyClient: once with the watchdog lease lease, once
// with the fixed lease lease.
func eachLeaseMode(t *testing.T, lease time.Duration, f func(t *testing.T, e *env, rf *replyFaults, m *Mutex)) {
	for _, fixed := range []bool{false, true} {
		t.Run(map[bool]string{false: "watchdog", true: "fixed"}[fixed], func(t *testing.T) {
			eachEnv(t, func(t *testing.T, e *env) {
				c, rf := e.faultyClient(t, WithWatchdogLease(lease))
				opts := []LockOption{WithLocalPasses(0, 0)}
				if fixed {
					opts = append(opts, WithFixedLease(lease))
				}
				f(t, e, rf, c.Mutex(t.Name(), opts...))
			})
		})
	}
}

// TestNoRenewalAfterLoss: once the watchdog reported a lease lost because
// no renewal answered in time (ErrConnectionLost, while every renewal in
// fact ran in Redis and only its reply was lost), it renews that lease no
// more: the key expires within
// its lease, although Redis answers again and the watchdog goes on
// renewing the Client's other leases.
func TestNoRenewalAfterLoss(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const lease = 900 * time.Millisecond
		c, rf := e.faultyClient(t, WithWatchdogLease(lease))
		m := c.Mutex(t.Name())
		ctx := withTimeout(t, 30*time.Second)
		l := mustLock(t, ctx, m.Lock)
		owner := l.h.owner
		// A lease of another kind, renewed all along, keeps the watchdog
		// making its passes.
		keeper := mustLock(t, ctx, c.RWMutex(t.Name()+"-keeper").RLock)

		// Every renewal of the Mutex runs in Redis, and its reply is lost.
		rf.lose(runs(renewScript), -1, 0)
		select {
		case <-l.Lost():
		case <-time.After(10 * lease):
			t.Fatal("the lease was not reported lost while its renewals went unanswered")
		}
		require.True(t, errors.Is(l.Err(), ErrConnectionLost), "lost with %v", l.Err())
		rf.clear()
		// The renewals that ran before the report kept the key for at most
		// a lease after it.
		lost := time.Now()
		time.Sleep(lease + lease/2)
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.NotEqual(t, owner, st.Owner, "the key of a lease lost %v ago is still its own: pttl %v", time.Since(lost), st.TTL)
		other := mustLock(t, ctx, e.client(t).Mutex(t.Name()).TryLock)
		require.NoError(t, other.Unlock(ctx))
		require.NoError(t, keeper.Err())
		require.NoError(t, keeper.Unlock(ctx))
	})
}

// TestLateConfirmationIsRepeated: a late grant's confirmation whose own
// reply comes late (a third of the lease or more after it was sent) does
// not deliver the lease with little of it left: the lease is confirmed
// again, and delivered with most of its lease ahead. So with a watchdog
// lease and with a fixed one.
func TestLateConfirmationIsRepeated(t *testing.T) {
	const lease = 900 * time.Millisecond
	eachLeaseMode(t, lease, func(t *testing.T, e *env, rf *replyFaults, m *Mutex) {
		ctx := withTimeout(t, 30*time.Second)
		rf.hold(runs(acquireScript), 1, lease/2)
		rf.hold(runs(renewScript), 1, lease/2)
		l, err := m.Lock(ctx)
		require.NoError(t, err)
		dl, ok := l.Deadline()
		require.True(t, ok, "delivered lost: %v", l.Err())
		require.Greater(t, time.Until(dl), lease/2, "delivered with %v of its lease left", time.Until(dl))
		requireHeldBy(t, m, l)
		require.NoError(t, l.Unlock(ctx))
	})
}

// TestHandedOverLeaseCountsFromBeforeItsRelease: a lock a release hands over
// to a waiter holds its lease from that release, which the waiter places by
// the server's clock, in whole milliseconds, after its last attempt: more
// than the difference of the two readings less a millisecond after it. So
// the lease counts (Deadline, and the grant the schedule test checks) from
// no later than the release, which ran before its reply came back.
func TestHandedOverLeaseCountsFromBeforeItsRelease(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		m := e.client(t).Mutex(t.Name(), WithLocalPasses(0, 0))
		other := e.client(t).Mutex(t.Name(), WithLocalPasses(0, 0))
		handed := 0
		for i := range 40 {
			l := mustLock(t, ctx, other.Lock)
			got := m.Acquire(ctx)
			eventually(t, 10*time.Second, func() bool { return queuedMutexWaiters(t, ctx, other.c, t.Name()) == 1 }, "the waiter did not queue")
			// The release at a varying point of the server's millisecond.
			time.Sleep(time.Duration(i%10) * 100 * time.Microsecond)
			require.NoError(t, l.Unlock(ctx))
			released := time.Now()
			nl := recv(t, got, 10*time.Second, "the waiter")
			require.NoError(t, nl.Err())
			h := nl.h
			h.mu.Lock()
			from, initial := h.lastOK, h.initial
			h.mu.Unlock()
			if initial > 0 { // handed over, not taken by an attempt of its own
				handed++
				require.False(t, from.After(released), "trial %d: the lease handed over counts from %v after its release returned", i, from.Sub(released))
			}
			require.NoError(t, nl.Unlock(ctx))
		}
		require.Positive(t, handed, "no lock was handed over")
	})
}

// TestGrantHeldUpByALapseIsConfirmed: a grant that waits, before its Lease
// is delivered, while its Client lapses (its watchdog held up, as a pause
// of the process holds it up) is confirmed in Redis once the lapse ends,
// as a late reply is: the key it was granted with may have expired
// meanwhile, and another Client taken the lock. So for a lock a release
// handed over to the waiter (with a lease as short as the waiter's place),
// and for one taken free with a fixed lease. The acquisition goes on
// waiting, and gets the lock once the other Client releases it, with a
// greater token.
func TestGrantHeldUpByALapseIsConfirmed(t *testing.T) {
	for _, mode := range []string{"handed over", "fixed lease"} {
		t.Run(mode, func(t *testing.T) {
			eachEnv(t, func(t *testing.T, e *env) {
				ctx := withTimeout(t, 30*time.Second)
				// A short watchdog lease too: a waiter that takes the lock
				// by an attempt of its own rather than by the hand-over's
				// message holds it as briefly.
				c := e.client(t, WithWatchdogLease(1200*time.Millisecond))
				opts := []LockOption{WithLocalPasses(0, 0), WithWaiterExpiry(600 * time.Millisecond)}
				if mode == "fixed lease" {
					opts = []LockOption{WithLocalPasses(0, 0), WithFixedLease(600 * time.Millisecond)}
				}
				m := c.Mutex(t.Name(), opts...)
				first := e.client(t).Mutex(t.Name(), WithLocalPasses(0, 0))
				second := e.client(t).Mutex(t.Name(), WithLocalPasses(0, 0))
				warm(t, ctx, m)
				var (
					fl, sl  *Lease
					got     <-chan *Lease
					resume  func()
					stalled bool
				)
				defer func() {
					if stalled {
						resume()
					}
				}()
				if mode == "handed over" {
					fl = mustLock(t, ctx, first.Lock)
					got = m.Acquire(ctx)
					eventually(t, 10*time.Second, func() bool { return queuedMutexWaiters(t, ctx, c, t.Name()) == 1 }, "the waiter did not queue")
					resume, stalled = c.stallWatchdog(), true
					// Handed over to the waiter, whose grant waits for the
					// watchdog.
					require.NoError(t, fl.Unlock(ctx))
				} else {
					// Taken free; the grant waits for the watchdog.
					resume, stalled = c.stallWatchdog(), true
					got = m.Acquire(ctx)
				}
				// The key the waiter got expires; another Client takes the
				// lock.
				eventually(t, 10*time.Second, func() bool {
					l, err := second.TryLock(ctx)
					sl = l
					return err == nil
				}, "the lock granted during the lapse did not expire")
				st := requireHeldBy(t, second, sl)
				resume()
				stalled = false
				select {
				case l := <-got:
					now, err := second.Inspect(ctx)
					require.NoError(t, err)
					require.Failf(t, "a grant held up by a lapse was delivered", "lease of %s (token %d) delivered (Err %v) while %s holds the lock (token %d, then %d)",
						l.h.owner, l.Token(), l.Err(), now.Owner, st.Token, now.Token)
				case <-time.After(time.Second):
				}
				require.NoError(t, sl.Err())
				require.NoError(t, sl.Unlock(ctx))
				l := recv(t, got, 10*time.Second, "the waiter")
				require.NoError(t, l.Err())
				require.Greater(t, l.Token(), sl.Token(), "the waiter's token is not above the one before")
				require.NoError(t, l.Unlock(ctx))
			})
		})
	}
}
