package redisync

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// keeps matches the release calls that ask Redis to keep a Mutex for the
// Client's waiters (cohort.keep): the release script with one argument
// more, the number of tokens.
func keeps(cmd []string) bool {
	return runs(releaseScript)(cmd) && len(cmd) == 3+3+5
}

// cohortRefs is the number of users of m's cohort in its Client, and
// whether the Client still knows the cohort of the lease l.
func cohortRefs(m *Mutex, l *Lease) (refs int, known bool) {
	co := m.c.knownCohort(m.keys.lock)
	if co == nil {
		return 0, false
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.refs, co == l.co
}

// requireNoCohorts checks that c forgot every cohort: nobody uses them.
func requireNoCohorts(t testing.TB, c *Client) {
	t.Helper()
	require.Empty(t, c.knownCohorts())
}

// A keep whose reply comes after its lease was lost, once the next local
// waiter took the lock in Redis with a greater token, changes nothing in
// the Client: the next local pass hands out a token above the holder's,
// and the lost lease's user of the cohort is counted off once.
func TestMutexKeepLateReplyAfterLoss(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c, rf := e.faultyClient(t)
		// A short lease: the holder whose renewals find the lock gone
		// while its release is on its way reports the loss once its
		// deadline passed.
		m := c.Mutex(t.Name(), WithLocalPasses(2, time.Minute), WithRenewedLease(900*time.Millisecond))
		warm(t, ctx, m)
		l := mustLock(t, ctx, m.Lock) // nobody waits behind it: no tokens
		_, leases, errs := holdAndQueueFrom(t, ctx, m, l, 2)

		r, open := rf.gate(keeps, 1, false)
		unlocked := make(chan error, 1)
		go func() { unlocked <- l.Unlock(ctx) }()
		<-r.Ran()
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, l.h.owner, st.Owner, "the keep ran: the Client keeps the lock")
		forced, err := e.client(t).Mutex(t.Name()).ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, forced)
		select {
		case <-l.Lost():
		case <-time.After(10 * time.Second):
			t.Fatal("the loss of the lease whose keep is on its way was not reported")
		}
		l2 := nextLease(t, leases, errs, 10*time.Second, "the first local waiter did not take the lock in Redis")
		require.NotEqual(t, l.h.owner, l2.h.owner)
		require.Greater(t, l2.Token(), l.Token())

		open() // the keep's reply comes now
		require.ErrorIs(t, <-unlocked, ErrNotHeld)
		require.Error(t, l.Err())
		refs, known := cohortRefs(m, l2)
		require.True(t, known, "the Client forgot the cohort its holder and waiter use")
		require.Equal(t, 2, refs, "users of the cohort: the holder and the waiter")

		require.NoError(t, l2.Unlock(ctx))
		l3 := nextLease(t, leases, errs, 10*time.Second, "the lock was not passed on")
		require.Greater(t, l3.Token(), l2.Token(), "a token at or below its holder's was passed on")
		requireHeldBy(t, m, l3)
		require.NoError(t, l3.Unlock(ctx))
		requireNoCohorts(t, c)
		requireNextTokenAbove(t, ctx, e, t.Name(), l3.Token())
	})
}

// nextLease is the next lease on leases, which must hold; a failure on
// errs, or none within d, fails the test with msg.
func nextLease(t testing.TB, leases <-chan *Lease, errs <-chan error, d time.Duration, msg string) *Lease {
	t.Helper()
	select {
	case l := <-leases:
		require.NoError(t, l.Err())
		return l
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(d):
		t.Fatal(msg)
	}
	return nil
}

// requireNextTokenAbove checks that another Client's next acquisition of
// the Mutex name gets a token above tok.
func requireNextTokenAbove(t testing.TB, ctx context.Context, e *env, name string, tok uint64) {
	t.Helper()
	ol := mustLock(t, ctx, e.client(t).Mutex(name).Lock)
	require.Greater(t, ol.Token(), tok)
	require.NoError(t, ol.Unlock(ctx))
}

// A keep whose reply is lost, or comes after its Unlock gave up on it,
// frees the lock as a release would: its Unlock releases the hold in
// Redis, and the Client's waiters take the lock there at once.
func TestMutexKeepReplyLost(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c, rf := e.faultyClient(t)
		m := c.Mutex(t.Name(), WithLocalPasses(1, time.Minute))
		warm(t, ctx, m)
		for _, late := range []bool{false, true} {
			l := mustLock(t, ctx, m.Lock)
			_, leases, errs := holdAndQueueFrom(t, ctx, m, l, 1)
			uctx := ctx
			if late {
				// Held back past the Unlock's ctx.
				rf.hold(keeps, 1, time.Hour)
				var cancel context.CancelFunc
				uctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
			} else {
				rf.lose(keeps, 1, 0)
			}
			unlocked := make(chan error, 1)
			go func() { unlocked <- l.Unlock(uctx) }()
			nl := nextLease(t, leases, errs, 5*time.Second, fmt.Sprintf("late=%v: the Client's waiter is stranded behind a keep whose reply was lost", late))
			require.NotEqual(t, l.h.owner, nl.h.owner, "late=%v: a lease whose keep failed was passed on", late)
			require.Greater(t, nl.Token(), l.Token())
			requireHeldBy(t, m, nl)
			require.NoError(t, nl.Unlock(ctx))
			require.NoError(t, <-unlocked, "late=%v: the lock was freed", late)
			require.ErrorIs(t, l.Err(), ErrReleased)
			rf.clear()
			requireNoCohorts(t, c)
		}
	})
}

// A keep whose check of the ownership (a Client that detects changes
// checks every keep's reply) does not answer before its Unlock's ctx ends
// passes nothing on, and its Unlock releases the hold in Redis with the
// grace of a call on its way: the lock is not left kept, and renewed by
// the watchdog, for nobody, while the Client's waiter queues behind it.
func TestMutexKeepCheckPastUnlock(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c, rf := e.faultyClient(t)
		m := c.Mutex(t.Name(), WithLocalPasses(1, time.Minute))
		warm(t, ctx, m)
		l := mustLock(t, ctx, m.Lock) // nobody waits behind it: no tokens
		_, leases, errs := holdAndQueueFrom(t, ctx, m, l, 1)
		checks := func(cmd []string) bool {
			return runsWith(renewScript, l.h.owner)(cmd) && cmd[len(cmd)-1] == "0"
		}
		r := rf.hold(checks, 1, time.Hour)
		// Long enough for the keep's round trip, on a loaded machine too:
		// its check must be sent within it.
		uctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		unlocked := make(chan error, 1)
		go func() { unlocked <- l.Unlock(uctx) }()
		select {
		case <-r.Ran():
		case <-time.After(5 * time.Second):
			t.Fatal("the keep's reply was not checked")
		}
		select {
		case err := <-unlocked:
			require.NoError(t, err, "the release after the check gave up")
		case <-time.After(5 * time.Second):
			t.Fatal("Unlock did not return")
		}
		require.ErrorIs(t, l.Err(), ErrReleased)
		nl := nextLease(t, leases, errs, 5*time.Second, "the Client's waiter is stranded behind a lock kept for nobody")
		require.NotEqual(t, l.h.owner, nl.h.owner, "a lease whose keep was not checked was passed on")
		require.Greater(t, nl.Token(), l.Token())
		requireHeldBy(t, m, nl)
		require.NoError(t, nl.Unlock(ctx))
		rf.clear()
		requireNoCohorts(t, c)
	})
}

// Two Unlocks of one lease at once, while a goroutine of the Client waits
// and no token is left: one passes the lock on (asking Redis for a new
// budget), the other reports ErrNotHeld, and the successor holds.
func TestMutexConcurrentUnlocksKeep(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		c := e.client(t)
		m := c.Mutex(t.Name(), WithLocalPasses(1, time.Minute))
		warm(t, ctx, m)
		for round := 0; round < soak(20, 200); round++ {
			l := mustLock(t, ctx, m.Lock) // nobody waits behind it: no tokens
			w := lockAsync(ctx, m)
			eventually(t, 10*time.Second, func() bool { return localWaiters(m) == 1 }, "the waiter did not queue in the Client")
			var wg sync.WaitGroup
			start := make(chan struct{})
			errs := make([]error, 2)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					errs[i] = l.Unlock(ctx)
				}()
			}
			close(start)
			wg.Wait()
			o := <-w
			require.NoError(t, o.err)
			nl := o.l
			require.NoError(t, nl.Err(), "round %d: the successor was released by its predecessor's second Unlock", round)
			require.Equal(t, l.h.owner, nl.h.owner, "round %d: not passed on", round)
			st := requireHeldBy(t, m, nl)
			require.Equal(t, 1, st.Holds)
			ok := 0
			for _, err := range errs {
				if err == nil {
					ok++
				} else {
					require.ErrorIs(t, err, ErrNotHeld)
				}
			}
			require.Equal(t, 1, ok, "round %d: Unlocks returned %v", round, errs)
			require.NoError(t, nl.Unlock(ctx))
		}
		requireFree(t, m)
		requireNoCohorts(t, c)
	})
}

// An Unlock that passes the lock on locally, with tokens left or with a
// new budget from Redis, leaves the hold in Redis to its successor: no
// release runs after the keep, and the successor holds.
func TestMutexPassReleasesNothing(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c, rf := e.faultyClient(t)
		releases := rf.hold(runs(releaseScript), -1, 0) // counts them
		m := c.Mutex(t.Name(), WithLocalPasses(2, time.Minute))
		warm(t, ctx, m)
		before := releases.Hits()
		l := mustLock(t, ctx, m.Lock) // nobody waits behind it: no tokens
		_, leases, errs := holdAndQueueFrom(t, ctx, m, l, 4)
		// A keep, then passes with the block it got, or keeps again when
		// an invalidation of the keep's own write voided the block (the
		// key is tracked trackDelay after the acquisition): each Unlock
		// runs one release script (a keep) at most, and none after it
		// passed the lock on.
		for i := range 4 {
			require.NoError(t, l.Unlock(ctx))
			nl := nextLease(t, leases, errs, 10*time.Second, "the lock was not passed on")
			calls := releases.Hits() - before
			before += calls
			if i == 0 {
				require.Equal(t, 1, calls, "pass %d: release calls", i)
			}
			require.LessOrEqual(t, calls, 1, "pass %d: release calls", i)
			time.Sleep(20 * time.Millisecond)
			require.NoError(t, nl.Err(), "pass %d", i)
			require.Equal(t, l.h.owner, nl.h.owner, "pass %d: not passed on locally", i)
			require.Greater(t, nl.Token(), l.Token())
			st := requireHeldBy(t, m, nl)
			require.Equal(t, 1, st.Holds)
			require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
			requireHeldBy(t, m, nl)
			l = nl
		}
		require.NoError(t, l.Unlock(ctx))
		requireFree(t, m)
		requireNoCohorts(t, c)
	})
}

// A keep waits for the replicas WithReplicaAck asks for: when fewer
// acknowledge it, its tokens are not handed out and the lock is released,
// so a replica promoted before it saw the keep hands out no token the
// Client delivered.
func TestMutexKeepReplicaAck(t *testing.T) {
	e := ownServer(t)
	p, replica := proxiedReplica(t, e)
	c := e.client(t, WithReplicaAck(1, 300*time.Millisecond))
	ctx := withTimeout(t, 30*time.Second)
	m := c.Mutex(t.Name(), WithLocalPasses(1, time.Minute))
	warm(t, ctx, m)

	// The replica answers: when the lock passed on, the replica has the
	// block of tokens the keep reserved.
	l := mustLock(t, ctx, m.Lock)
	_, leases, _ := holdAndQueueFrom(t, ctx, m, l, 1)
	require.NoError(t, l.Unlock(ctx))
	nl := <-leases
	require.NoError(t, nl.Err())
	require.Equal(t, l.h.owner, nl.h.owner)
	reserved, err := replica.Do("HGET", m.keys.lock, "t")
	require.NoError(t, err)
	require.Equal(t, strconv.FormatUint(nl.Token(), 10), reserved, "the replica has the block when the lock passes on")

	// The replica hears nothing more: the waiter is not passed the lock;
	// it takes it in Redis, which the replica must acknowledge too.
	wctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	w := lockAsync(wctx, m)
	eventually(t, 10*time.Second, func() bool { return localWaiters(m) == 1 }, "the waiter did not queue in the Client")
	p.Blackhole()
	require.NoError(t, nl.Unlock(ctx))
	o := <-w
	delivered := []uint64{l.Token(), nl.Token()}
	if o.err == nil {
		delivered = append(delivered, o.l.Token())
	}

	// Failover to the replica, which never saw what its primary did since.
	require.NoError(t, e.server.Kill())
	require.NoError(t, p.Close())
	_, err = replica.Do("REPLICAOF", "NO", "ONE")
	require.NoError(t, err)
	other := dial(t, []string{replica.Addr}).Mutex(t.Name())
	_, err = other.ForceUnlock(ctx)
	require.NoError(t, err)
	ol := mustLock(t, ctx, other.Lock)
	for _, tok := range delivered {
		require.Greater(t, ol.Token(), tok, "a token was handed out twice")
	}
	require.NoError(t, ol.Unlock(ctx))
	require.ErrorIs(t, o.err, ErrNotReplicated, "the lock was passed on with tokens the replica never saw")
}

// A keep whose reply comes after an invalidation of the lock's key, which
// arrived while the keep was on its way, passes nothing on before Redis
// says the ownership still holds: the reply vouches for the hold as it was
// when the keep ran, and the change the invalidation told of may have come
// after (here a ForceUnlock, and another Client taking the lock). The
// Client's check of that change is held up meanwhile (its watchdog lapses
// while the loss of another of its leases is being reported), so only the
// keep's own care keeps the pass from being delivered while the other
// Client holds the lock. The waiter gets the lock once the other Client
// releases it, with a greater token.
func TestMutexKeepReplyAfterInvalidation(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c, rf := e.faultyClient(t)
		m := c.Mutex(t.Name(), WithLocalPasses(2, time.Minute))
		m2 := c.Mutex(t.Name()+"-2", WithLocalPasses(0, 0))
		other := e.client(t)
		om, om2 := other.Mutex(m.Name(), WithLocalPasses(0, 0)), other.Mutex(m2.Name())
		warm(t, ctx, m)
		l := mustLock(t, ctx, m.Lock) // nobody waits behind it: no tokens
		l2 := mustLock(t, ctx, m2.Lock)
		time.Sleep(100 * time.Millisecond) // both keys read for tracking
		_, leases, errs := holdAndQueueFrom(t, ctx, m, l, 1)

		r, open := rf.gate(keeps, 1, false)
		unlocked := make(chan error, 1)
		go func() { unlocked <- l.Unlock(ctx) }()
		<-r.Ran()
		resume := c.stallWatchdog()
		stalled := true
		defer func() {
			if stalled {
				resume()
			}
		}()
		// The Client's tracker reports l2 lost, and waits for the watchdog
		// there: the changes it hears of next are not checked.
		_, err := om2.ForceUnlock(ctx)
		require.NoError(t, err)
		eventually(t, 10*time.Second, func() bool { return l2.Err() != nil }, "the loss of the other lease was not noticed")
		_, err = om.ForceUnlock(ctx)
		require.NoError(t, err)
		ol := mustLock(t, ctx, om.TryLock)
		time.Sleep(200 * time.Millisecond) // the invalidation arrives
		open()
		requireNoPassWhileHeld(t, ctx, leases, errs, om, 500*time.Millisecond, "a keep's reply that came after an invalidation passed the lock on")
		resume()
		stalled = false
		require.ErrorIs(t, <-unlocked, ErrNotHeld)
		require.Error(t, l.Err(), "the loss was not reported")
		select {
		case nl := <-leases:
			require.Failf(t, "the waiter got the lock another Client holds", "token %d (Err %v), the other's %d", nl.Token(), nl.Err(), ol.Token())
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(time.Second):
		}
		waiterTakesAfter(t, ctx, c, m, ol, leases, errs)
	})
}

// reservingAcquires matches the Mutex acquisitions that reserve tokens for
// local passes (cohort.lead): the acquire script with a reserve argument.
func reservingAcquires(cmd []string) bool {
	if !runs(acquireScript)(cmd) || len(cmd) < 3 {
		return false
	}
	n, err := strconv.Atoi(cmd[2])
	i := 3 + n + reserveArg
	return err == nil && i < len(cmd) && cmd[i] != ""
}

// TestMutexLeadReplyAfterInvalidation: the acquisition that leads a
// cohort in Redis reserves a block of tokens for the goroutines waiting
// behind it. When the Client hears of a change of the lock's hash while
// that acquisition's reply is on its way, the change may have come after
// the script ran (here a ForceUnlock, then another Client's acquisition):
// the block passes nothing on, and the lead's Unlock asks Redis, which
// finds the lock another's.
func TestMutexLeadReplyAfterInvalidation(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx, c, rf, m, om := crowdBesideOther(t, e)
		l := mustLock(t, ctx, m.Lock)
		time.Sleep(100 * time.Millisecond) // the key read for tracking
		_, leases, errs := holdAndQueueFrom(t, ctx, m, l, 2)

		r, open := rf.gate(reservingAcquires, 1, false)
		// l's loss makes its first waiter lead an acquisition in Redis,
		// which reserves tokens for the second.
		_, err := om.ForceUnlock(ctx)
		require.NoError(t, err)
		select {
		case <-r.Ran():
		case <-time.After(10 * time.Second):
			t.Fatal("no acquisition reserved tokens for the waiter behind it")
		}
		_, err = om.ForceUnlock(ctx)
		require.NoError(t, err)
		ol := mustLock(t, ctx, om.TryLock)
		time.Sleep(200 * time.Millisecond) // the invalidations arrive
		open()
		lead := nextLease(t, leases, errs, 10*time.Second, "the lead's acquisition was not delivered")
		unlocked := make(chan error, 1)
		go func() { unlocked <- lead.Unlock(ctx) }()
		requireNoPassWhileHeld(t, ctx, leases, errs, om, time.Second, "a lead's reply that came after an invalidation passed the lock on")
		require.ErrorIs(t, <-unlocked, ErrNotHeld)
		waiterTakesAfter(t, ctx, c, m, ol, leases, errs)
	})
}

// requireNoPassWhileHeld fails t, with what, if a lease of the waiters
// comes within d while om's Client holds the lock.
func requireNoPassWhileHeld(t *testing.T, ctx context.Context, leases <-chan *Lease, errs <-chan error, om *Mutex, d time.Duration, what string) {
	t.Helper()
	select {
	case nl := <-leases:
		now, err := om.Inspect(ctx)
		require.NoError(t, err)
		require.Failf(t, what, "lease of token %d delivered (Err %v) while %s holds the lock (token %d)",
			nl.Token(), nl.Err(), now.Owner, now.Token)
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(d):
	}
}

// waiterTakesAfter releases ol, another Client's lease of m's lock, and
// checks that m's waiter then takes the lock in Redis with a greater
// token, and that nothing of the lock is left in c once it unlocks.
func waiterTakesAfter(t *testing.T, ctx context.Context, c *Client, m *Mutex, ol *Lease, leases <-chan *Lease, errs <-chan error) {
	t.Helper()
	require.NoError(t, ol.Unlock(ctx))
	nl := nextLease(t, leases, errs, 10*time.Second, "the waiter did not take the lock in Redis")
	require.Greater(t, nl.Token(), ol.Token())
	requireHeldBy(t, m, nl)
	require.NoError(t, nl.Unlock(ctx))
	requireNoCohorts(t, c)
}

// TestMutexKeepReplyWhileKeyUntracked: a keep's own write ends the
// Client's tracking of the lock's key until its tracker reads the key
// again, and a key whose last change the tracker has not read yet brings
// no invalidation at all. So a change after the keep ran (here a
// ForceUnlock, then another Client's acquisition) may come without a word
// to the Client, and the keep's reply, however quiet the key, vouches for
// nothing after it: the pass waits for Redis to say the ownership still
// holds.
func TestMutexKeepReplyWhileKeyUntracked(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx, c, rf, m, om := crowdBesideOther(t, e)
		raw := e.rueidisClient(t)
		l := mustLock(t, ctx, m.Lock)
		time.Sleep(100 * time.Millisecond) // the key read for tracking
		_, leases, errs := holdAndQueueFrom(t, ctx, m, l, 1)

		// The tracker's reads of the key do not reach Redis: the next
		// change of the key is the last one the Client hears of.
		key, field := m.keys.lock, l.h.trackField()
		refused := rf.refuse(func(cmd []string) bool { return len(cmd) > 2 && cmd[0] == "HGET" && cmd[1] == key && cmd[2] == field }, -1)
		co := c.knownCohort(key)
		require.NotNil(t, co)
		co.mu.Lock()
		voids := co.voids
		co.mu.Unlock()
		require.NoError(t, raw.Do(ctx, raw.B().Pexpire().Key(key).Milliseconds(time.Minute.Milliseconds()).Build()).Error())
		eventually(t, 10*time.Second, func() bool {
			co.mu.Lock()
			defer co.mu.Unlock()
			return co.voids != voids
		}, "the change of the key was not heard of")

		r, open := rf.gate(keeps, 1, false)
		unlocked := make(chan error, 1)
		go func() { unlocked <- l.Unlock(ctx) }()
		select {
		case <-r.Ran():
		case <-time.After(10 * time.Second):
			t.Fatal("the Unlock did not ask Redis to keep the lock")
		}
		_, err := om.ForceUnlock(ctx)
		require.NoError(t, err)
		ol := mustLock(t, ctx, om.TryLock)
		time.Sleep(200 * time.Millisecond) // an invalidation, if any, arrives
		open()
		requireNoPassWhileHeld(t, ctx, leases, errs, om, time.Second, "a keep's reply passed the lock on while the key was untracked")
		require.ErrorIs(t, <-unlocked, ErrNotHeld)
		rf.drop(refused)
		waiterTakesAfter(t, ctx, c, m, ol, leases, errs)
	})
}

// crowdBesideOther returns, for a test of t, a context, a Client that
// detects changes over a reply wrapper, a Mutex of it with a budget of two
// local passes within a minute (its scripts loaded), and the same lock on
// another Client, without local passes.
func crowdBesideOther(t *testing.T, e *env) (ctx context.Context, c *Client, rf *replyFaults, m, om *Mutex) {
	t.Helper()
	ctx = withTimeout(t, 30*time.Second)
	c, rf = e.faultyClient(t)
	m = c.Mutex(t.Name(), WithLocalPasses(2, time.Minute))
	om = e.client(t).Mutex(m.Name(), WithLocalPasses(0, 0))
	warm(t, ctx, m)
	return ctx, c, rf, m, om
}
