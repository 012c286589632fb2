package redisync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync/internal/faultproxy"
	"github.com/redisync/redisync/internal/redistest"
)

func TestMutexCancellationsLeaveNothing(t *testing.T) {
	names := []string{"a", "b", "c", "{d}"}
	eachEnv(t, func(t *testing.T, e *env) {
		cancellations(t, e, "cancel", soak(10000, 100000), below(2*time.Millisecond), func(ctx context.Context, c *Client, _ []*Client) (*Lease, error) {
			m := c.Mutex(names[rand.IntN(len(names))])
			return oneOf(m.Lock, waited(m.Acquire))(ctx)
		})
	})
}

func TestMutexRedisRestart(t *testing.T) {
	e, holder, waiter, done := restartPair(t, time.Second)
	ctx := withTimeout(t, time.Minute)
	const locks = 5
	var held []*Lease
	var waiting []<-chan *Lease
	for i := range locks {
		name := fmt.Sprintf("restart:%d", i)
		l := mustLock(t, ctx, holder.Mutex(name).Lock)
		held = append(held, l)
		// Two waiting goroutines per lock.
		waiting = append(waiting, waiter.Mutex(name).Acquire(ctx), waiter.Mutex(name).Acquire(ctx))
	}
	e.awaitChannels(t, locks, 5*time.Second, "waiters did not subscribe")

	require.NoError(t, e.server.Restart())
	for _, l := range held {
		// Gone, or already taken by a waiter when the watchdog looked.
		requireLost(t, l, 10*time.Second, ErrExpired, ErrConnectionLost, ErrTakenOver)
		require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
	}
	unlockAll(t, ctx, waiting, 10*time.Second)
	done()
}

func TestMutexLostBeforeExpiryWhenRedisHangs(t *testing.T) {
	e := ownServer(t)
	ctx := context.Background()
	const lease = 600 * time.Millisecond
	c := e.client(t, WithWatchdogLease(lease))
	l := mustLock(t, ctx, c.Mutex("hang").Lock)
	time.Sleep(lease / 2)
	require.NoError(t, e.server.Pause())
	paused := time.Now()
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		e.server.Resume()
		t.Fatal("Lost not closed while Redis hangs")
	}
	detected := time.Since(paused)
	require.NoError(t, e.server.Resume())
	require.ErrorIs(t, l.Err(), ErrConnectionLost)
	// The lease was last renewed before the pause, so it ends within one
	// lease of it: Lost must come no later.
	require.Less(t, detected, lease, "loss reported after the key could have expired")
	t.Logf("loss reported %v after Redis stopped answering (lease %v)", detected, lease)
}

func TestMutexWaitersAfterSubscriptionBreaks(t *testing.T) {
	e := ownServer(t)
	ctx := withTimeout(t, time.Minute)
	holder := e.client(t)
	l := mustLock(t, ctx, holder.Mutex("resub").Lock)
	waiter := e.client(t)
	w := waiter.Mutex("resub").Acquire(ctx)
	e.awaitChannels(t, 1, 5*time.Second, "waiter did not subscribe")
	// Drop the waiter's connections; the release is published while it
	// resubscribes, or before.
	_, err := e.server.Do("CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, recv(t, w, 10*time.Second, "waiter after the release").Unlock(ctx))
}

// A subscription that lives through many connection breaks comes back as
// promptly after the last one as after the first, so the head of a fair
// queue, woken by one message only, does not wait for its heartbeat.
func TestResubscribePromptAfterManyBreaks(t *testing.T) {
	e := ownServer(t)
	waiter, p := e.proxied(t)
	ctx := withTimeout(t, 2*time.Minute)
	m := waiter.FairMutex("rebreak", WithWaiterExpiry(time.Minute))
	sub, err := waiter.notify.join(t.Context(), m.keys.channel, ownPubSub)
	require.NoError(t, err)
	defer sub.leave()
	eventually(t, 10*time.Second, func() bool { return sub.confirms.Load() > 0 }, "never subscribed")
	var slowest time.Duration
	for range 40 {
		n := sub.confirms.Load()
		start := time.Now()
		p.Cut()
		eventually(t, 10*time.Second, func() bool { return sub.confirms.Load() > n }, "not resubscribed")
		slowest = max(slowest, time.Since(start))
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("slowest resubscription of 40: %v", slowest)
	require.Less(t, slowest, 500*time.Millisecond)

	// A release published while the head's connection is down reaches it
	// once it is back, long before its heartbeat.
	l, err := e.client(t).FairMutex("rebreak", WithFixedLease(time.Minute)).Lock(ctx)
	require.NoError(t, err)
	w := m.Acquire(ctx)
	eventually(t, 10*time.Second, func() bool {
		st, err := m.Inspect(ctx)
		return err == nil && st.Waiters == 1
	}, "waiter never queued")
	p.Cut()
	start := time.Now()
	require.NoError(t, l.Unlock(ctx))
	wl := <-w
	require.NoError(t, wl.Err())
	t.Logf("head acquired %v after a release during a break", time.Since(start))
	require.Less(t, time.Since(start), 2*time.Second)
	// The lock came in the message: the waiter's command connection, cut
	// too, has not been used since.
	unlockRetrying(t, ctx, wl)
}

func TestMutexReplicaAck(t *testing.T) {
	e, c, replica := ackedClient(t)
	ctx := context.Background()
	m := c.Mutex("acked")
	l := mustLock(t, ctx, m.Lock)
	requireLockOwner(t, replica, m.keys.lock, l.h.owner, "the replica has the lock when Lock returns")
	require.NoError(t, l.Unlock(ctx))

	// A replica that does not answer: the acquisition is undone.
	require.NoError(t, replica.Pause())
	defer replica.Resume()
	_, err := m.TryLock(ctx)
	require.ErrorIs(t, err, ErrNotReplicated)
	st, err := m.Inspect(ctx)
	require.NoError(t, err)
	require.False(t, st.Locked, "nothing held after a failed acknowledgement")
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = m.Lock(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, ErrNotReplicated, "Lock retried until its context ended")
	require.NoError(t, replica.Resume())
	l, err = m.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))

	// A waiter is not handed the lock, which would skip the WAIT: it takes
	// the lock itself and is refused while the replica does not answer; so
	// is a FairMutex's.
	holder := e.client(t)
	for _, fair := range []bool{false, true} {
		lock, keys, hold := m.Lock, m.keys, holder.Mutex("acked").Lock
		if fair {
			fm := c.FairMutex("acked")
			lock, keys, hold = fm.Lock, fm.keys, holder.FairMutex("acked").Lock
		}
		hl, err := hold(ctx)
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		failed := make(chan error, 1)
		go func() {
			l, err := lock(wctx)
			if err == nil {
				l.Unlock(ctx)
			}
			failed <- err
		}()
		eventually(t, 5*time.Second, func() bool {
			n, err := holder.rc.Do(ctx, holder.rc.B().Zcard().Key(keys.queue).Build()).AsInt64()
			return err == nil && n == 1
		}, "waiter did not queue")
		require.NoError(t, replica.Pause())
		require.NoError(t, hl.Unlock(ctx))
		err = <-failed
		require.NoError(t, replica.Resume())
		require.ErrorIs(t, err, ErrNotReplicated, "fair=%v: the waiter got the lock without the replica", fair)
	}
}

// An Unlock whose reply never came is retried after other holders came and
// went: the retry reports success, and touches nobody else's lock.
func TestMutexUnlockRetryAfterLostReply(t *testing.T) {
	e := ownServer(t)
	a, p := e.proxied(t)
	b := e.client(t)
	ctx := context.Background()

	// Load the scripts, so that the release below is one EVALSHA.
	warm := mustLock(t, ctx, a.Mutex("warm-up").Lock)
	require.NoError(t, warm.Unlock(ctx))

	l := mustLock(t, ctx, a.Mutex("lost-reply").Lock)
	p.SetLatency(300 * time.Millisecond)
	// The caller gives up before the reply comes. Its context is cancelled
	// rather than given a deadline: rueidis may close a connection at a
	// context's deadline, and the proxy would then drop the release on its
	// way, which this test means to deliver.
	short, cancel := context.WithCancel(ctx)
	stop := time.AfterFunc(100*time.Millisecond, cancel)
	err := l.Unlock(short)
	stop.Stop()
	cancel()
	require.ErrorIs(t, err, context.Canceled, "the reply is late")
	// The release reaches Redis; others take the lock and release it.
	for range 3 {
		bl := mustLock(t, ctx, b.Mutex("lost-reply").Lock)
		require.NoError(t, bl.Unlock(ctx))
	}
	bl := mustLock(t, ctx, b.Mutex("lost-reply").Lock)
	p.SetLatency(0)
	require.NoError(t, l.Unlock(ctx), "the retry must not report a false error")
	require.ErrorIs(t, l.Err(), ErrReleased)
	st, err := b.Mutex("lost-reply").Inspect(ctx)
	require.NoError(t, err)
	require.True(t, st.Locked)
	require.Equal(t, b.ID(), st.ClientID(), "b's lock untouched")
	require.NoError(t, bl.Unlock(ctx))
}

// A holder whose network goes silent learns it lost the lease before any
// other client can take the lock, in every trial.
func TestMutexLossBeforeTakeover(t *testing.T) {
	e := ownServer(t)
	const lease = time.Second
	trials := soak(50, 500)
	contender := e.client(t)
	var (
		mu      sync.Mutex
		margins []time.Duration
	)
	for round := 0; round < trials; round += 10 {
		var wg sync.WaitGroup
		for i := round; i < min(round+10, trials); i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m, err := lossTrial(e, contender, fmt.Sprintf("blackhole:%d", i), lease)
				if err != nil {
					t.Errorf("trial %d: %v", i, err)
					return
				}
				mu.Lock()
				margins = append(margins, m)
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	if t.Failed() {
		return
	}
	slices.Sort(margins)
	t.Logf("%d trials, lease %v: Lost closed before the takeover by %v (min), %v (median), %v (max)",
		len(margins), lease, margins[0], margins[len(margins)/2], margins[len(margins)-1])
}

// lossTrial blackholes a holder's connection and returns how long before
// the contender's acquisition its Lost channel closed.
func lossTrial(e *env, contender *Client, name string, lease time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := faultproxy.New(e.server.Addr)
	if err != nil {
		return 0, err
	}
	defer p.Close()
	holder, err := Dial(rueidis.ClientOption{InitAddress: []string{p.Addr()}, DisableCache: true},
		WithWatchdogLease(lease), WithLogger(quietLogger()))
	if err != nil {
		return 0, err
	}
	defer func() {
		p.Heal()
		holder.Close()
	}()
	l, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		return 0, err
	}
	acquired := make(chan time.Time, 1)
	go func() {
		cl, err := contender.Mutex(name).Lock(ctx)
		at := time.Now()
		if err == nil {
			cl.Unlock(context.Background())
		}
		acquired <- at
	}()
	// Any phase of the renewal cycle.
	time.Sleep(time.Duration(rand.Int64N(int64(lease / 3))))
	p.Blackhole()
	var lostAt time.Time
	select {
	case <-l.Lost():
		lostAt = time.Now()
	case at := <-acquired:
		return 0, fmt.Errorf("taken over at %v, before Lost closed", at)
	case <-ctx.Done():
		return 0, errors.New("Lost never closed")
	}
	if !errors.Is(l.Err(), ErrConnectionLost) {
		return 0, fmt.Errorf("reason %v", l.Err())
	}
	at := <-acquired
	if !lostAt.Before(at) {
		return 0, fmt.Errorf("Lost closed %v after the takeover", lostAt.Sub(at))
	}
	return at.Sub(lostAt), nil
}

// On a server without sharded pub/sub (Redis 6.2; here SSUBSCRIBE and
// SPUBLISH are renamed away), waiters subscribe with SUBSCRIBE, are woken,
// resubscribe after their connection breaks and unsubscribe when done.
func TestMutexWaitersWithoutShardedPubSub(t *testing.T) {
	s := redistest.Standalone(t, "--rename-command", "SSUBSCRIBE", "", "--rename-command", "SPUBLISH", "")
	e := &env{name: "standalone", addrs: []string{s.Addr}, server: s}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const names = 10
	w := waitOnMany(t, ctx, e, "classic", names)
	channels, err := s.Do("PUBSUB", "CHANNELS")
	require.NoError(t, err)
	require.Len(t, strings.Fields(channels), names, "classic subscriptions")
	require.True(t, w.waiter.notify.classic.Load())
	handOverAcrossBreak(t, ctx, e, w, func() {
		_, err := s.Do("CLIENT", "KILL", "TYPE", "pubsub")
		require.NoError(t, err)
	})
	e.requireNoSubscriptions(t)
}

// hangCase is one primitive of TestAcquireEndsAtOnceWhileRedisHangs: name,
// how the holder takes the lock, and the waiter's Acquire.
type hangCase struct {
	name    string
	hold    func() (*Lease, error)
	acquire func(context.Context) <-chan *Lease
}

// moreHangCases, when set, adds the cases of the locks of other layouts,
// which the tests of this package cannot import.
var moreHangCases func(ctx context.Context, holder, waiter *Client, prefix string) []hangCase

// TestAcquireEndsAtOnceWhileRedisHangs: when ctx ends while Redis cannot be
// reached, Acquire delivers at once (its attempt in flight is waited for
// half a second at most) rather than after the releases it sends on its
// own, which run in the background; once Redis answers again, nothing is
// left. For every primitive that queues, and the groups and quorums that
// wait for a lock.
func TestAcquireEndsAtOnceWhileRedisHangs(t *testing.T) {
	e := ownServer(t)
	holder := e.client(t)
	waiter, p := e.proxied(t)
	ctx := withTimeout(t, 30*time.Second)
	prefix := "hang:"
	cases := []hangCase{
		{"mutex", func() (*Lease, error) { return holder.Mutex(prefix + "m").Lock(ctx) }, waiter.Mutex(prefix + "m").Acquire},
		{"fair", func() (*Lease, error) { return holder.FairMutex(prefix + "f").Lock(ctx) }, waiter.FairMutex(prefix + "f").Acquire},
		{"rwmutex", func() (*Lease, error) { return holder.RWMutex(prefix + "rw").Lock(ctx) }, waiter.RWMutex(prefix + "rw").RAcquire},
		{"semaphore", func() (*Lease, error) {
			s := holder.Semaphore(prefix + "s")
			if _, err := s.SetSize(ctx, 1); err != nil {
				return nil, err
			}
			return s.Lock(ctx, 1)
		}, func(ctx context.Context) <-chan *Lease { return waiter.Semaphore(prefix+"s").Acquire(ctx, 1) }},
		{"group", func() (*Lease, error) { return holder.Mutex(prefix + "g").Lock(ctx) },
			NewGroup(waiter.Mutex(prefix+"g"), waiter.Mutex(prefix+"g2")).Acquire},
		{"quorum", func() (*Lease, error) { return holder.Mutex(prefix + "q").Lock(ctx) },
			NewQuorum(prefix+"q", []*Client{waiter}).Acquire},
	}
	if moreHangCases != nil {
		// The locks of other layouts: see layouts_test.go.
		cases = append(cases, moreHangCases(ctx, holder, waiter, prefix)...)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := tc.hold()
			require.NoError(t, err)
			actx, cancel := context.WithCancel(ctx)
			ch := tc.acquire(actx)
			time.Sleep(200 * time.Millisecond) // queued
			p.Blackhole()
			cancel()
			ended := time.Now()
			select {
			case got := <-ch:
				require.ErrorIs(t, got.Err(), context.Canceled)
				require.LessOrEqual(t, time.Since(ended), deadlineOverrun, "Acquire delivered late after its context ended")
				t.Logf("delivered %v after the context ended", time.Since(ended).Round(time.Millisecond))
			case <-time.After(3 * time.Second):
				t.Fatal("Acquire did not deliver within 3s of its context ending")
			}
			p.Heal()
			require.NoError(t, l.Unlock(ctx))
		})
	}
	require.NoError(t, waiter.Close())
	_, err := holder.Semaphore(prefix + "s").Delete(ctx)
	require.NoError(t, err)
	e.requireNothingLeft(t, "redisync:")
}

// TestTransientServerStates: replies that say Redis cannot serve the
// command for a while (loading its data after a restart, a Cluster slot
// moving or without a master) are retried like connection errors, and
// replies that refuse the command are not.
func TestTransientServerStates(t *testing.T) {
	e := standaloneEnv(t)
	rc := e.rueidisClient(t)
	ctx := withTimeout(t, 10*time.Second)
	reply := func(text string) error {
		return rc.Do(ctx, rc.B().Eval().Script("return redis.error_reply(ARGV[1])").Numkeys(0).Arg(text).Build()).Error()
	}
	for _, text := range []string{"LOADING Redis is loading the dataset in memory", "TRYAGAIN Multiple keys request during rehashing of slot",
		"CLUSTERDOWN The cluster is down", "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'"} {
		err := reply(text)
		require.Error(t, err)
		require.True(t, transient(redisErr("acquire", err)), "%q is not retried", text)
	}
	for _, text := range []string{"WRONGTYPE Operation against a key holding the wrong kind of value", "ERR something"} {
		require.False(t, transient(redisErr("acquire", reply(text))), "%q is retried", text)
	}
}

// TestUnlockWithoutAnswerLockMovedOn: an Unlock whose answer never came,
// and that is not retried, does not hide what happens to the lock next:
// once another Client holds it, the lease reports the loss at the next
// renewal, not at its deadline as a lost connection. A retry still
// reports the release that landed.
func TestUnlockWithoutAnswerLockMovedOn(t *testing.T) {
	e := ownServer(t)
	const lease = 3 * time.Second
	a, p := e.proxied(t, WithWatchdogLease(lease))
	b := e.client(t)
	ctx := withTimeout(t, 20*time.Second)
	warm := mustLock(t, ctx, a.Mutex("warm-up").Lock)
	require.NoError(t, warm.Unlock(ctx))

	l := mustLock(t, ctx, a.Mutex("moved-on").Lock)
	p.SetLatency(300 * time.Millisecond)
	short, cancel := context.WithCancel(ctx)
	stop := time.AfterFunc(100*time.Millisecond, cancel)
	err := l.Unlock(short)
	stop.Stop()
	cancel()
	require.ErrorIs(t, err, context.Canceled, "the reply is late")
	bl := mustLock(t, ctx, b.Mutex("moved-on").Lock) // the release landed
	taken := time.Now()
	p.SetLatency(0)
	select {
	case <-l.Lost():
		require.Less(t, time.Since(taken), lease/3+time.Second, "the loss was reported late")
		require.NotErrorIs(t, l.Err(), ErrConnectionLost, "the loss was put down to the connection")
		t.Logf("lost %v after another Client took the lock: %v", time.Since(taken).Round(time.Millisecond), l.Err())
	case <-time.After(lease):
		t.Fatal("the loss was not reported")
	}
	require.NoError(t, l.Unlock(ctx), "the retry reports the release that landed")
	require.NoError(t, bl.Unlock(ctx))
}

// TestUnlockRetryAfterExpiryReportsTheLoss: a retried Unlock that finds the
// lock moved on reports a release only when its first attempt, whose reply
// was lost, was sent while the Client vouched for the hold. Sent after the
// lease's deadline, it may have found the lock expired already: the lease
// reports the loss, even though the Client had not noticed it yet when the
// first attempt went out.
func TestUnlockRetryAfterExpiryReportsTheLoss(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const lease = 400 * time.Millisecond
		c, rf := e.faultyClientDetecting(t, false)
		b := e.client(t)
		ctx := withTimeout(t, 20*time.Second)
		name := "retry-after-expiry"
		l := mustLock(t, ctx, c.Mutex(name, WithFixedLease(lease)).Lock)
		dl, ok := l.Deadline()
		require.True(t, ok)
		// The Client does not look at its leases for a while: past the
		// deadline, nothing reports the lease lost.
		resume := c.stallWatchdog()
		stalled := true
		defer func() {
			if stalled {
				resume()
			}
		}()
		time.Sleep(time.Until(dl))
		// The key expires; another Client takes the lock and releases it.
		bl := mustLock(t, ctx, b.Mutex(name).Lock)
		require.NoError(t, bl.Unlock(ctx))
		require.NoError(t, l.Err(), "nothing noticed the expiry yet")
		// The first Unlock runs, finds nothing, and its reply is lost.
		rf.lose(runs(releaseScript), 1, 0)
		err := l.Unlock(ctx)
		require.ErrorIs(t, err, errReplyLost)
		resume()
		stalled = false
		err = l.Unlock(ctx)
		require.ErrorIs(t, err, ErrNotHeld, "the retry reported a release of a lease that had expired")
		require.ErrorIs(t, err, ErrExpired)
		require.ErrorIs(t, l.Err(), ErrExpired)
	})
}

// TestAttemptHeldUpIsUndoneAfterItRuns: an attempt held up on its way
// (here a connection paused longer than the caller waits) is given back
// after it ran, never before. A release sent at once could take another
// connection of the multiplexed client, run first, find nothing, and leave
// the lock the attempt then took held by nobody for a whole lease.
func TestAttemptHeldUpIsUndoneAfterItRuns(t *testing.T) {
	e := ownServer(t)
	p, err := faultproxy.New(e.server.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	// rueidis' default: more than one connection, each call on any of them.
	c := dialWith(t, rueidis.ClientOption{InitAddress: []string{p.Addr()}, DisableCache: true})
	t.Cleanup(p.Heal)
	other := e.client(t)
	ctx := withTimeout(t, 2*time.Minute)
	s := c.Semaphore("held-up:s")
	_, err = s.SetSize(ctx, 1)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		lock func(context.Context) (*Lease, error)
		free func(context.Context) (*Lease, error) // succeeds once the lock is free again
	}{
		{"mutex", c.Mutex("held-up:m").Lock, other.Mutex("held-up:m").TryLock},
		{"fair", c.FairMutex("held-up:f").Lock, other.FairMutex("held-up:f").TryLock},
		{"rwmutex", c.RWMutex("held-up:rw").Lock, other.RWMutex("held-up:rw").TryLock},
		{"semaphore", func(ctx context.Context) (*Lease, error) { return s.Lock(ctx, 1) },
			func(ctx context.Context) (*Lease, error) { return other.Semaphore("held-up:s").TryLock(ctx, 1) }},
		{"group", NewGroup(c.Mutex("held-up:g1"), c.Mutex("held-up:g2")).Lock,
			NewGroup(other.Mutex("held-up:g1"), other.Mutex("held-up:g2")).TryLock},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var late time.Duration
			// Both connections open, each with calls behind it.
			for range 8 {
				l, err := tc.lock(ctx)
				require.NoError(t, err)
				require.NoError(t, l.Unlock(ctx))
			}
			for trial := range 3 {
				const pause = time.Second
				p.Pause(pause)
				paused := time.Now()
				lctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				_, err := tc.lock(lctx)
				cancel()
				require.ErrorIs(t, err, context.DeadlineExceeded, "trial %d", trial)
				// The lease is 30s: free within 2s of the pause's end means
				// the attempt was given back.
				var l *Lease
				eventually(t, pause+2*time.Second-time.Since(paused), func() bool {
					l, err = tc.free(ctx)
					return err == nil
				}, "trial %d: the lock is still taken 2s after the pause ended", trial)
				late = max(late, time.Since(paused)-pause)
				require.NoError(t, l.Unlock(ctx))
			}
			t.Logf("free again %v after the pause ended at the latest", late.Round(time.Millisecond))
		})
	}
}

// TestCloseEndsWhileAnAttemptNeverAnswers: an attempt abandoned while Redis
// hangs is given up on in the background, undone all the same, and Close
// does not wait for its reply longer than that.
func TestCloseEndsWhileAnAttemptNeverAnswers(t *testing.T) {
	e := ownServer(t)
	noLeak := leakCheck(t)
	c := dial(t, e.addrs)
	ctx := withTimeout(t, time.Minute)
	m := c.Mutex("never-answers")
	require.NoError(t, e.server.Pause())
	defer e.server.Resume()
	lctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	start := time.Now()
	_, err := m.Lock(lctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 2*time.Second, "Lock returned long after its deadline")
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		c.Close()
	}()
	select {
	case <-closed:
		t.Logf("Close returned %v after Lock, Redis still hung", time.Since(start).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatal("Close still waits for a reply that never comes")
	}
	require.NoError(t, e.server.Resume())
	noLeak(nil)
}
