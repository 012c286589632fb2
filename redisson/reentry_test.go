package redisson

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/internal/engine"
)

// javaThread is one Java thread's lock of a Redisson kind, in the
// simulator: a single attempt (never queued), a wait in its turn, and an
// unlock.
type javaThread struct {
	try     func(ctx context.Context) (bool, error)
	wait    func(ctx context.Context) error
	release func(ctx context.Context) error
}

// javaAttempt drops the TTL of a simulator's single attempt.
func javaAttempt(try func(ctx context.Context) (bool, time.Duration, error)) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		ok, _, err := try(ctx)
		return ok, err
	}
}

// javaUnlocked drops the reply of a simulator's unlock.
func javaUnlocked(unlock func(ctx context.Context) (rueidis.RedisResult, error)) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := unlock(ctx)
		return err
	}
}

// redissonReentrant is a Redisson kind that a Go lease's Context re-enters,
// with its Java side: the Go lock of a name, the Go scripts that acquire and
// unlock it (for reply faults), a Java thread's lock of the name, and the
// name's queue (nil for kinds without one).
type redissonReentrant struct {
	name    string
	lock    func(c *Client, name string) func(context.Context) (*redisync.Lease, error)
	acquire engine.Script
	unlock  engine.Script
	java    func(t testing.TB, e *env, name string) javaThread
	queue   func(t testing.TB, e *env, name string) []string
	// reads: the kind has read holds, which Java readers share with Go
	// readers (sharedReadsBeside).
	reads bool
}

var redissonReentrants = []redissonReentrant{
	{
		name:    "Lock",
		lock:    func(c *Client, name string) func(context.Context) (*redisync.Lease, error) { return c.Lock(name).Lock },
		acquire: redissonLockScript, unlock: redissonUnlockScript,
		java: func(t testing.TB, e *env, name string) javaThread {
			j := newJavaRLock(t, e, name)
			return javaThread{javaAttempt(j.tryLock), func(ctx context.Context) error { return j.lock(ctx, nil) }, javaUnlocked(j.unlock)}
		},
	},
	{
		name: "FairLock",
		lock: func(c *Client, name string) func(context.Context) (*redisync.Lease, error) {
			return c.FairLock(name).Lock
		},
		acquire: redissonFairLockScript, unlock: redissonFairUnlockScript,
		java: func(t testing.TB, e *env, name string) javaThread {
			j := newJavaFair(t, e, name)
			return javaThread{
				javaAttempt(func(ctx context.Context) (bool, time.Duration, error) { return j.tryLock(ctx, false) }),
				func(ctx context.Context) error { return j.lock(ctx, nil) }, javaUnlocked(j.unlock)}
		},
		queue: func(t testing.TB, e *env, name string) []string {
			return newJavaFair(t, e, name).queue(t)
		},
	},
	{
		name: "ReadWriteLock",
		lock: func(c *Client, name string) func(context.Context) (*redisync.Lease, error) {
			return c.ReadWriteLock(name).Lock
		},
		acquire: redissonRWWriteScript, unlock: redissonRWUnlockScript,
		java: func(t testing.TB, e *env, name string) javaThread {
			j := newJavaRW(t, e, name)
			return javaThread{
				javaAttempt(func(ctx context.Context) (bool, time.Duration, error) { return j.try(ctx, true) }),
				func(ctx context.Context) error { return j.lock(ctx, true, nil) },
				javaUnlocked(func(ctx context.Context) (rueidis.RedisResult, error) { return j.unlock(ctx, true) })}
		},
		reads: true,
	},
}

// A re-entry through a Redisson lease whose hold is gone (a Java thread
// force-unlocked it and holds the lock now; the Go Client has not noticed)
// is refused with the lease's loss at once: it neither takes a place in
// the fair lock's queue, which would hold every Java and Go waiter back
// until its timeout, nor waits.
func TestRedissonReentryThroughLostLeaseIsRefused(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		for _, k := range redissonReentrants {
			t.Run(k.name, func(t *testing.T) {
				ctx := withTimeout(t, time.Minute)
				name := "reentry-lost-" + k.name + "-" + e.Name
				c := e.renewalClient(t)
				lock := k.lock(c, name)
				parent := mustLock(t, ctx, lock)
				// Behind the Go Client's back: the hash is deleted and a
				// Java thread takes the lock.
				rc := e.RueidisClient(t)
				require.NoError(t, rc.Do(ctx, rc.B().Del().Key(name).Build()).Error())
				j := k.java(t, e, name)
				ok, err := j.try(ctx)
				require.NoError(t, err)
				require.True(t, ok)
				require.NoError(t, parent.Err(), "the Client noticed the loss before the re-entry")

				rctx, cancel := context.WithTimeout(context.WithoutCancel(parent.Context()), 2*time.Second)
				defer cancel()
				l, err := lock(rctx)
				require.Nil(t, l)
				require.ErrorIs(t, err, redisync.ErrNotHeld)
				require.ErrorIs(t, err, redisync.ErrTakenOver)
				require.NoError(t, rctx.Err(), "the re-entry waited")
				require.ErrorIs(t, parent.Err(), redisync.ErrTakenOver, "the lease's loss is reported")
				if k.queue != nil {
					require.Empty(t, k.queue(t, e, name), "the re-entry left an entry in the queue")
				}

				// A Java waiter is served as soon as the holder unlocks.
				j2 := k.java(t, e, name)
				got := make(chan error, 1)
				go func() { got <- j2.wait(ctx) }()
				time.Sleep(50 * time.Millisecond)
				require.NoError(t, j.release(ctx))
				select {
				case err := <-got:
					require.NoError(t, err)
				case <-time.After(5 * time.Second):
					t.Fatal("the Java waiter was held back")
				}
				require.NoError(t, j2.release(ctx))
			})
		}
	})
}

// An Unlock of the outer lease while a re-entry's script already added its
// hold, and its reply is not back, does not release that hold: the
// re-entry's redisync.Lease holds the lock, and no Java thread takes it until the
// re-entry unlocks.
func TestRedissonUnlockKeepsReentryOnItsWay(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		for _, k := range redissonReentrants {
			t.Run(k.name, func(t *testing.T) {
				ctx := withTimeout(t, time.Minute)
				name := "reentry-unlock-" + k.name + "-" + e.Name
				c, rf := e.faultyClient(t)
				lock := k.lock(c, name)
				j := k.java(t, e, name)
				parent := mustLock(t, ctx, lock)

				entry, openEntry := rf.Gate(runsWith(k.acquire, name), 1, false)
				type result struct {
					l   *redisync.Lease
					err error
				}
				reentered := make(chan result, 1)
				go func() {
					l, err := lock(context.WithoutCancel(parent.Context()))
					reentered <- result{l, err}
				}()
				<-entry.Ran()

				release, openRelease := rf.Gate(runsWith(k.unlock, name), 1, false)
				unlocked := make(chan error, 1)
				go func() { unlocked <- parent.Unlock(ctx) }()
				<-release.Ran()
				javaTook, err := j.try(ctx)
				require.NoError(t, err)

				openEntry()
				r := <-reentered
				deliveredHeld := r.err == nil && r.l.Err() == nil
				openRelease()
				require.NoError(t, <-unlocked)
				if javaTook {
					require.NoError(t, j.release(ctx))
					require.False(t, deliveredHeld, "a re-entry was delivered held while a Java thread holds the lock")
					t.Fatal("the outer Unlock released the hold of the re-entry on its way")
				}
				require.NoError(t, r.err)
				require.NoError(t, r.l.Err())
				ok, err := j.try(ctx)
				require.NoError(t, err)
				require.False(t, ok, "a Java thread took the lock the re-entry holds")
				require.NoError(t, r.l.Unlock(ctx))
				ok, err = j.try(ctx)
				require.NoError(t, err)
				require.True(t, ok, "the last Unlock left a hold")
				require.NoError(t, j.release(ctx))
			})
		}
	})
}

// Randomized: Go re-enters a Redisson lease while another goroutine
// unlocks it, re-entries' replies held back at random, while Java threads
// of the simulator contend for the lock. No redisync.Lease is delivered held (Err
// nil) while a Java thread holds the lock, no Java thread nor Go waiter
// waits long for a lock held for milliseconds at a time, and the fair
// lock's queue is left empty. Beside the read-write lock's rounds, a Go
// reader shares a read lock of its own with a Java reader of a shorter
// watchdog (sharedReadsBeside). The seed
// replays the choices (not the goroutines' interleaving): -seed N.
func TestRedissonReentryVersusUnlock(t *testing.T) {
	seed := testSeed(t, "TestRedissonReentryVersusUnlock")
	rounds := soak(300, 5000)
	eachEnv(t, func(t *testing.T, e *env) {
		for ki, k := range redissonReentrants {
			t.Run(k.name, func(t *testing.T) {
				var reads <-chan struct{}
				if k.reads {
					// Its own random source: the rounds' choices stay
					// those of the seed without it.
					reads = sharedReadsBeside(t, e, rand.New(rand.NewPCG(seed, 0x5ead<<8|uint64(len(e.Name)))))
				}
				runReentryVersusUnlock(t, e, k, rand.New(rand.NewPCG(seed, uint64(ki)<<8|uint64(len(e.Name)))), rounds)
				if reads != nil {
					<-reads
				}
			})
		}
	})
}

// sharedReadsBeside runs, in the background, a read lock shared by a Go
// reader and a Java reader whose watchdog lease is far shorter than the Go
// Client's (4.5 s, renewed every 1.5 s): the Java reader's renewals set the
// hash's expiry to its own lease. It comes before the Go reader one time
// in four (the Go reader finds its expiry when it takes its hold), after
// it otherwise (found at the Go reader's first renewal), and dies after
// that renewal, before the next. The Go reader must keep the read lock: a
// Java writer that gets in while the Go reader's lease says it holds is an
// error. The channel is closed when it is done.
func sharedReadsBeside(t *testing.T, e *env, rnd *rand.Rand) <-chan struct{} {
	const goLease = 4500 * time.Millisecond
	done := make(chan struct{})
	ctx := withTimeout(t, time.Minute)
	name := "shared-reads-" + e.Name
	reader, writer := newJavaRW(t, e, name), newJavaRW(t, e, name)
	reader.lease = time.Duration(400+rnd.IntN(200)) * time.Millisecond
	javaFirst := rnd.IntN(4) == 0
	joinAfter := time.Duration(200+rnd.IntN(700)) * time.Millisecond
	// Its last renewal comes after the Go reader's first (goLease/3),
	// which does not set the hash's expiry back to the Java reader's
	// lease; its expiry and the checks come before the second.
	dies := goLease/3 + 300*time.Millisecond + time.Duration(rnd.IntN(200))*time.Millisecond
	rw := e.client(t, redisync.WithWatchdogLease(goLease)).ReadWriteLock(name)
	go func() {
		defer close(done)
		join := func() bool {
			ok, _, err := reader.try(ctx, false)
			if err != nil || !ok {
				t.Errorf("shared reads: the Java reader could not join the Go reader: %v", err)
				return false
			}
			return true
		}
		if javaFirst && !join() {
			return
		}
		r, err := rw.RLock(ctx)
		if err != nil {
			t.Errorf("shared reads: the Go reader: %v", err)
			return
		}
		defer func() {
			if err := r.Unlock(ctx); err != nil {
				t.Errorf("shared reads: the Go reader's Unlock: %v", err)
			}
		}()
		began := time.Now()
		if !javaFirst {
			time.Sleep(joinAfter)
			if !join() {
				return
			}
		}
		// The Java reader's watchdog, a third of its lease apart, until
		// it dies.
		for time.Since(began) < dies {
			if err := reader.renewRead(ctx); err != nil {
				t.Errorf("shared reads: the Java reader's renewal: %v", err)
				return
			}
			time.Sleep(reader.lease / 3)
		}
		died := time.Now()
		for time.Since(died) < reader.lease+250*time.Millisecond {
			ok, _, err := writer.try(ctx, true)
			if err != nil {
				t.Errorf("shared reads: the Java writer: %v", err)
				return
			}
			if ok {
				t.Errorf("shared reads: a Java writer got in %v after the Java reader (lease %v, joined first %v) died, while the Go reader's lease says it holds (Err %v)",
					time.Since(died).Round(time.Millisecond), reader.lease, javaFirst, r.Err())
				if _, err := writer.unlock(ctx, true); err != nil {
					t.Errorf("shared reads: the Java writer's unlock: %v", err)
				}
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := r.Err(); err != nil {
			t.Errorf("shared reads: the Go reader lost its read lock: %v", err)
		}
	}()
	return done
}

func runReentryVersusUnlock(t *testing.T, e *env, k redissonReentrant, rnd *rand.Rand, rounds int) {
	ctx := withTimeout(t, time.Minute+time.Duration(rounds)*100*time.Millisecond)
	name := "reentry-race-" + k.name + "-" + e.Name
	c, rf := e.faultyClient(t)
	lock := k.lock(c, name)
	dur := func(max time.Duration) time.Duration { return time.Duration(rnd.Int64N(int64(max))) }

	var javaHolds atomic.Int64
	var violations, stalls atomic.Int64
	var mu sync.Mutex
	var report []string
	violation := func(what string, args ...any) {
		violations.Add(1)
		mu.Lock()
		report = append(report, fmt.Sprintf(what, args...))
		mu.Unlock()
	}
	// heldCheck reports a redisync.Lease that says it holds while a Java thread
	// holds the lock.
	heldCheck := func(l *redisync.Lease, what string, round int) {
		if javaHolds.Load() > 0 && l.Err() == nil {
			violation("round %d: %s delivered held while a Java thread holds the lock", round, what)
		}
	}

	// Java threads: each waits in its turn, holds for a moment, unlocks.
	var stop atomic.Bool
	var javas sync.WaitGroup
	for i := range 2 {
		j := k.java(t, e, name)
		jr := rand.New(rand.NewPCG(rnd.Uint64(), uint64(i)))
		javas.Add(1)
		go func() {
			defer javas.Done()
			for !stop.Load() {
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := j.wait(wctx)
				cancel()
				if err != nil {
					stalls.Add(1)
					mu.Lock()
					report = append(report, fmt.Sprintf("Java thread %d: %v", i, err))
					mu.Unlock()
					return
				}
				javaHolds.Add(1)
				time.Sleep(time.Duration(jr.Int64N(int64(2 * time.Millisecond))))
				javaHolds.Add(-1)
				if err := j.release(ctx); err != nil {
					t.Errorf("Java thread %d: unlock: %v", i, err)
					return
				}
				time.Sleep(time.Duration(jr.Int64N(int64(3 * time.Millisecond))))
			}
		}()
	}

	var delivered, refused, fresh int
	for round := range rounds {
		if stalls.Load() > 0 {
			break
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		parent, err := lock(pctx)
		cancel()
		if err != nil {
			stalls.Add(1)
			mu.Lock()
			report = append(report, fmt.Sprintf("round %d: the Go waiter: %v", round, err))
			mu.Unlock()
			break
		}
		heldCheck(parent, "the outer lease", round)
		unlockAfter, reenterAfter := dur(2*time.Millisecond), dur(2*time.Millisecond)
		if rnd.IntN(2) == 0 {
			// The re-entry's reply comes back late: its hold is in Redis
			// while the Unlock runs.
			rf.Hold(runsWith(k.acquire, name), 1, dur(5*time.Millisecond))
		}
		cancelsWithParent := rnd.IntN(4) == 0
		reentries := 1 + rnd.IntN(2)
		parentID := ownerOf(parent)
		var wg sync.WaitGroup
		wg.Add(1 + reentries)
		go func() {
			defer wg.Done()
			time.Sleep(unlockAfter)
			if err := parent.Unlock(ctx); err != nil {
				t.Errorf("round %d: outer Unlock: %v", round, err)
			}
		}()
		var rmu sync.Mutex
		for range reentries {
			holdFor := dur(time.Millisecond)
			go func() {
				defer wg.Done()
				time.Sleep(reenterAfter)
				base := context.WithoutCancel(parent.Context())
				if cancelsWithParent {
					base = parent.Context()
				}
				rctx, cancel := context.WithTimeout(base, 10*time.Second)
				defer cancel()
				l, err := lock(rctx)
				if err != nil {
					rmu.Lock()
					refused++
					rmu.Unlock()
					return
				}
				rmu.Lock()
				if ownerOf(l) == parentID {
					delivered++
				} else {
					fresh++
				}
				rmu.Unlock()
				heldCheck(l, "a re-entry", round)
				time.Sleep(holdFor)
				heldCheck(l, "a re-entry, a moment later,", round)
				before := l.Err()
				if err := l.Unlock(ctx); err != nil {
					violation("round %d: a re-entry delivered held could not unlock: %v (before: %v; %d re-entries, cancels %v, fresh %v)", round, err, before, reentries, cancelsWithParent, ownerOf(l) != parentID)
				}
			}()
		}
		wg.Wait()
		rf.Clear()
	}
	stop.Store(true)
	javas.Wait()

	t.Logf("%s: %d rounds: %d re-entries granted, %d refused (the outer lease ended first), %d fresh acquisitions", e.Name, rounds, delivered, refused, fresh)
	mu.Lock()
	for _, r := range report {
		t.Log(r)
	}
	mu.Unlock()
	require.Zero(t, violations.Load(), "Leases delivered held while a Java thread holds the lock")
	require.Zero(t, stalls.Load(), "Java threads or the Go waiter held back")
	if k.queue != nil {
		require.Empty(t, k.queue(t, e, name), "entries left in the queue")
	}
	rc := e.RueidisClient(t)
	n, err := rc.Do(ctx, rc.B().Exists().Key(name).Build()).AsInt64()
	require.NoError(t, err)
	require.Zero(t, n, "the lock is still held")
}
