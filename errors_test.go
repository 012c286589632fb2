package redisync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync/internal/testenv"
)

// requireOnePrefix checks that err's message has the package's prefix once,
// at its start, and no script digest or line.
func requireOnePrefix(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, what)
	msg := err.Error()
	require.True(t, strings.HasPrefix(msg, "redisync: "), "%s: %q", what, msg)
	require.Equal(t, 1, strings.Count(msg, "redisync"), "%s: %q", what, msg)
	require.NotContains(t, msg, "script:", what)
	require.NotContains(t, msg, "user_script", what)
}

// TestWrongTypeErrors plants a string at the key of each primitive: every
// call reports ErrWrongType in a message with one prefix, and the Redis
// reply stays reachable with errors.As.
func TestWrongTypeErrors(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rc := e.rueidisClient(t)
		c := e.client(t, WithPrefix("wrongtype"))
		name := t.Name()
		for _, tc := range []struct {
			what string
			key  string
			call func() error
		}{
			{"Mutex.Lock", c.keysFor(name).lock, func() error { _, err := c.Mutex(name).Lock(ctx); return err }},
			{"Mutex.TryLock", c.keysFor(name).lock, func() error { _, err := c.Mutex(name).TryLock(ctx); return err }},
			{"Mutex.Inspect", c.keysFor(name).lock, func() error { _, err := c.Mutex(name).Inspect(ctx); return err }},
			{"FairMutex.TryLock", c.fairKeysFor(name).lock, func() error { _, err := c.FairMutex(name).TryLock(ctx); return err }},
			{"RWMutex.TryLock", c.rwKeysFor(name).lock, func() error { _, err := c.RWMutex(name).TryLock(ctx); return err }},
			{"RWMutex.RLock", c.rwKeysFor(name).lock, func() error { _, err := c.RWMutex(name).RLock(ctx); return err }},
			{"Semaphore.TryLock", c.semKeysFor(name).sem, func() error { _, err := c.Semaphore(name).TryLock(ctx, 1); return err }},
			{"Semaphore.SetSize", c.semKeysFor(name).sem, func() error { _, err := c.Semaphore(name).SetSize(ctx, 1); return err }},
			{"Latch.Reset", c.key("latch", name), func() error { _, err := c.Latch(name).Reset(ctx, 1); return err }},
			{"Latch.Count", c.key("latch", name), func() error { _, err := c.Latch(name).Count(ctx); return err }},
			{"Group.TryLock", c.keysFor(name).lock, func() error {
				_, err := NewGroup(c.Mutex(name), c.Mutex("{"+name+"}:other")).TryLock(ctx)
				return err
			}},
			{"Quorum.TryLock", c.keysFor(name).lock, func() error {
				_, err := NewQuorum(name, []*Client{c}).TryLock(ctx)
				return err
			}},
		} {
			t.Run(tc.what, func(t *testing.T) {
				require.NoError(t, rc.Do(ctx, rc.B().Set().Key(tc.key).Value("precious").Build()).Error())
				defer rc.Do(context.Background(), rc.B().Del().Key(tc.key).Build())
				err := tc.call()
				require.ErrorIs(t, err, ErrWrongType)
				requireOnePrefix(t, err, tc.what)
				var re *rueidis.RedisError
				require.ErrorAs(t, err, &re, "the Redis reply is not in the chain: %v", err)
				require.True(t, strings.HasPrefix(re.Error(), "WRONGTYPE"), "%q", re.Error())
			})
		}
	})
}

// TestErrorf covers how errors of the package show the errors they wrap.
func TestErrorf(t *testing.T) {
	reply := errors.New("WRONGTYPE Operation against a key holding the wrong kind of value script: 155bf91a57ec1f5d5207ef92a19284ca33bfad07, on @user_script:176.")
	err := errorf("%s: %w: %w", "acquire", ErrWrongType, reply)
	require.Equal(t, "redisync: acquire: key holds a value of the wrong type: WRONGTYPE Operation against a key holding the wrong kind of value", err.Error())
	require.ErrorIs(t, err, ErrWrongType)
	require.ErrorIs(t, err, reply)

	// Nested and joined errors, and errors made by fmt.Errorf.
	inner := fmt.Errorf("%w: %w", ErrNotHeld, ErrReleased)
	err = errorf("%w: %w", ErrNoQuorum, joinedErrs{fmt.Errorf("server 0: %w", ErrLocked), errorf("server 1: %w", inner)})
	require.Equal(t, "redisync: no quorum: server 0: locked by another owner; server 1: lock not held: lease released", err.Error())
	for _, target := range []error{ErrNoQuorum, ErrLocked, ErrNotHeld, ErrReleased} {
		require.ErrorIs(t, err, target)
	}

	// A lock name is shown as given.
	err = errorf("%w: %q", ErrLocked, "a: redisync: b")
	require.Equal(t, `redisync: locked by another owner: "a: redisync: b"`, err.Error())
	// An error of another package keeps its message.
	err = errorf("%s: %w", "acquire", context.DeadlineExceeded)
	require.Equal(t, "redisync: acquire: context deadline exceeded", err.Error())
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestSemaphoreNoSizeMessage: ErrNoSize and ErrInvalidArgument in one
// message with one prefix.
func TestSemaphoreNoSizeMessage(t *testing.T) {
	e := standaloneEnv(t)
	c := e.client(t)
	_, err := c.Semaphore(t.Name()).TryLock(context.Background(), 1)
	require.ErrorIs(t, err, ErrNoSize)
	require.ErrorIs(t, err, ErrInvalidArgument)
	requireOnePrefix(t, err, "TryLock")
	require.Equal(t, `redisync: invalid argument: semaphore has no size: "TestSemaphoreNoSizeMessage" (set it with TrySetSize)`, err.Error())
}

// TestBusyIsErrLocked: the single attempt of every primitive that finds
// what it asks for held by another owner matches ErrLocked.
func TestBusyIsErrLocked(t *testing.T) {
	require.ErrorIs(t, ErrNoPermits, ErrLocked)
	require.NotErrorIs(t, ErrLocked, ErrNoPermits)
	eachEnv(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a, b, b2 := e.client(t, WithPrefix("busy")), e.client(t, WithPrefix("busy")), e.client(t, WithPrefix("busy"))
		name := t.Name()
		for _, tc := range []struct {
			what string
			hold func(context.Context) (*Lease, error)
			try  func(context.Context) (*Lease, error)
		}{
			{"Mutex", a.Mutex(name).Lock, b.Mutex(name).TryLock},
			{"FairMutex", a.FairMutex(name).Lock, b.FairMutex(name).TryLock},
			{"RWMutex write-held, TryLock", a.RWMutex(name).Lock, b.RWMutex(name).TryLock},
			{"RWMutex write-held, TryRLock", a.RWMutex(name).Lock, b.RWMutex(name).TryRLock},
			{"RWMutex read-held, TryLock", a.RWMutex(name).RLock, b.RWMutex(name).TryLock},
			{"Semaphore", func(ctx context.Context) (*Lease, error) {
				if _, err := a.Semaphore(name).SetSize(ctx, 1); err != nil {
					return nil, err
				}
				return a.Semaphore(name).Lock(ctx, 1)
			}, func(ctx context.Context) (*Lease, error) { return b.Semaphore(name).TryLock(ctx, 1) }},
			{"Group in one script", a.Mutex("{" + name + "}:2").Lock,
				NewGroup(b.Mutex("{"+name+"}:1"), b.Mutex("{"+name+"}:2")).TryLock},
			{"Group one lock at a time", a.Mutex(name + "/2").Lock,
				NewGroup(b.Mutex(name+"/1"), b2.Mutex(name+"/2")).TryLock},
			{"Quorum", a.Mutex(name + "/q").Lock, NewQuorum(name+"/q", []*Client{b}).TryLock},
		} {
			t.Run(tc.what, func(t *testing.T) {
				held, err := tc.hold(ctx)
				require.NoError(t, err)
				defer held.Unlock(context.Background())
				l, err := tc.try(ctx)
				require.Nil(t, l)
				require.ErrorIs(t, err, ErrLocked)
				requireOnePrefix(t, err, tc.what)
			})
		}
	})
}

// TestWaitEndedNamesTheLock: a blocking call whose ctx ends while the
// thing is taken returns an error that names it (and for a Mutex or a
// FairMutex, its holder, as the last attempt read it) and matches both ctx's
// error and the error a single attempt gives (ErrLocked; ErrNoPermits,
// which matches it, for a semaphore; ctx's error alone for a latch, which
// nobody holds), for a deadline and a cancel. A single attempt still
// gives ErrLocked alone.
func TestWaitEndedNamesTheLock(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		cleaner := e.client(t) // closed after c
		c := e.client(t)
		base := "wait-ended-" + e.name
		// Held until the Client closes.
		mutex := mustLock(t, ctx, c.Mutex(base+"-mutex").Lock)
		fair := mustLock(t, ctx, c.FairMutex(base+"-fair").Lock)
		mustLock(t, ctx, c.RWMutex(base+"-rw").Lock)
		mustLock(t, ctx, c.RWMutex(base+"-rwr").RLock)
		sem := c.Semaphore(base + "-sem")
		_, err := sem.SetSize(ctx, 1)
		require.NoError(t, err)
		_, err = sem.Lock(ctx, 1)
		require.NoError(t, err)
		// A semaphore outlives its Client: deleted once c closed, so that
		// the tests that look for keys left find none of it.
		t.Cleanup(func() {
			c.Close()
			cleaner.Semaphore(base + "-sem").Delete(context.Background())
		})
		mustLock(t, ctx, c.Mutex("{"+base+"-group}:b").Lock)
		mustLock(t, ctx, c.Mutex(base+"-quorum").Lock)
		latch := c.Latch(base + "-latch")
		_, err = latch.TrySetCount(ctx, 1)
		require.NoError(t, err)
		t.Cleanup(func() { latch.CountDown(context.Background()) })

		testenv.RequireWaitsEnd(t, ctx, ErrLocked, []testenv.WaitCase{
			{Name: base + "-mutex", Busy: ErrLocked, Holder: mutex.h.owner, Wait: func(ctx context.Context) error { return locked(c.Mutex(base + "-mutex").Lock(ctx)) }},
			{Name: base + "-fair", Busy: ErrLocked, Holder: fair.h.owner, Wait: func(ctx context.Context) error { return locked(c.FairMutex(base + "-fair").Lock(ctx)) }},
			{Name: base + "-rw", Busy: ErrLocked, Wait: func(ctx context.Context) error { return locked(c.RWMutex(base + "-rw").RLock(ctx)) }},
			{Name: base + "-rwr", Busy: ErrLocked, Wait: func(ctx context.Context) error { return locked(c.RWMutex(base + "-rwr").Lock(ctx)) }},
			{Name: base + "-sem", Busy: ErrNoPermits, Wait: func(ctx context.Context) error { return locked(sem.Lock(ctx, 1)) }},
			{Name: "{" + base + "-group}", Busy: ErrLocked, Wait: func(ctx context.Context) error {
				return locked(NewGroup(c.Mutex("{"+base+"-group}:a"), c.Mutex("{"+base+"-group}:b")).Lock(ctx))
			}},
			{Name: base + "-quorum", Busy: ErrLocked, Wait: func(ctx context.Context) error { return locked(NewQuorum(base+"-quorum", []*Client{c}).Lock(ctx)) }},
			{Name: base + "-mutex", Busy: ErrLocked, Holder: mutex.h.owner, Wait: func(ctx context.Context) error { return acquired(c.Mutex(base + "-mutex").Acquire(ctx)) }},
			{Name: base + "-latch", Busy: nil, Wait: latch.Wait},
		})

		_, err = c.Mutex(base + "-mutex").TryLock(ctx)
		require.ErrorIs(t, err, ErrLocked)
		require.NotErrorIs(t, err, context.DeadlineExceeded)
		require.NotContains(t, err.Error(), "wait for")
	})
}
