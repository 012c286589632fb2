package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// javaThread is one Java thread's lock of a Redisson kind, in the
// simulator: a single attempt (never queued), a wait in its turn, and an
// unlock.
type javaThread interface {
	try(ctx context.Context) (bool, error)
	wait(ctx context.Context) error
	release(ctx context.Context) error
}

// redissonReentrant is a Redisson kind that a Go lease's Context re-enters,
// with its Java side: the Go lock of a name, the Go scripts that acquire and
// unlock it (for reply faults), a Java thread's lock of the name, and the
// name's queue (nil for kinds without one).
type redissonReentrant struct {
	name    string
	lock    func(c *Client, name string) func(context.Context) (*Lease, error)
	acquire script
	unlock  script
	java    func(t testing.TB, e *env, name string) javaThread
	queue   func(t testing.TB, e *env, name string) []string
}

type javaRLockHolder struct{ *javaRLock }

func (j javaRLockHolder) try(ctx context.Context) (bool, error) {
	ok, _, err := j.tryLock(ctx)
	return ok, err
}
func (j javaRLockHolder) wait(ctx context.Context) error { return j.lock(ctx, nil) }
func (j javaRLockHolder) release(ctx context.Context) error {
	_, err := j.unlock(ctx)
	return err
}

type javaFairHolder struct{ *javaFair }

func (j javaFairHolder) try(ctx context.Context) (bool, error) {
	ok, _, err := j.tryLock(ctx, false)
	return ok, err
}
func (j javaFairHolder) wait(ctx context.Context) error { return j.lock(ctx, nil) }
func (j javaFairHolder) release(ctx context.Context) error {
	_, err := j.unlock(ctx)
	return err
}

type javaWriteHolder struct{ *javaRW }

func (j javaWriteHolder) try(ctx context.Context) (bool, error) {
	ok, _, err := j.javaRW.try(ctx, true)
	return ok, err
}
func (j javaWriteHolder) wait(ctx context.Context) error { return j.lock(ctx, true, nil) }
func (j javaWriteHolder) release(ctx context.Context) error {
	_, err := j.unlock(ctx, true)
	return err
}

var redissonReentrants = []redissonReentrant{
	{
		name:    "RedissonLock",
		lock:    func(c *Client, name string) func(context.Context) (*Lease, error) { return c.RedissonLock(name).Lock },
		acquire: redissonLockScript, unlock: redissonUnlockScript,
		java: func(t testing.TB, e *env, name string) javaThread { return javaRLockHolder{newJavaRLock(t, e, name)} },
	},
	{
		name: "RedissonFairLock",
		lock: func(c *Client, name string) func(context.Context) (*Lease, error) {
			return c.RedissonFairLock(name).Lock
		},
		acquire: redissonFairLockScript, unlock: redissonFairUnlockScript,
		java: func(t testing.TB, e *env, name string) javaThread { return javaFairHolder{newJavaFair(t, e, name)} },
		queue: func(t testing.TB, e *env, name string) []string {
			return newJavaFair(t, e, name).queue(t)
		},
	},
	{
		name: "RedissonReadWriteLock",
		lock: func(c *Client, name string) func(context.Context) (*Lease, error) {
			return c.RedissonReadWriteLock(name).Lock
		},
		acquire: redissonRWWriteScript, unlock: redissonRWUnlockScript,
		java: func(t testing.TB, e *env, name string) javaThread { return javaWriteHolder{newJavaRW(t, e, name)} },
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
				name := "reentry-lost-" + k.name + "-" + e.name
				c := e.renewalClient(t)
				lock := k.lock(c, name)
				parent := mustLock(t, ctx, lock)
				// Behind the Go Client's back: the hash is deleted and a
				// Java thread takes the lock.
				rc := e.rueidisClient(t)
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
				require.ErrorIs(t, err, ErrNotHeld)
				require.ErrorIs(t, err, ErrTakenOver)
				require.NoError(t, rctx.Err(), "the re-entry waited")
				require.ErrorIs(t, parent.Err(), ErrTakenOver, "the lease's loss is reported")
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
// re-entry's Lease holds the lock, and no Java thread takes it until the
// re-entry unlocks.
func TestRedissonUnlockKeepsReentryOnItsWay(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		for _, k := range redissonReentrants {
			t.Run(k.name, func(t *testing.T) {
				ctx := withTimeout(t, time.Minute)
				name := "reentry-unlock-" + k.name + "-" + e.name
				c, rf := e.faultyClient(t)
				lock := k.lock(c, name)
				j := k.java(t, e, name)
				parent := mustLock(t, ctx, lock)

				entry, openEntry := rf.gate(runsWith(k.acquire, name), 1, false)
				type result struct {
					l   *Lease
					err error
				}
				reentered := make(chan result, 1)
				go func() {
					l, err := lock(context.WithoutCancel(parent.Context()))
					reentered <- result{l, err}
				}()
				<-entry.Ran()

				release, openRelease := rf.gate(runsWith(k.unlock, name), 1, false)
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
