package redisson

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync"
)

// The Java side of Redisson's semaphore and count-down latch in the
// simulator: Redisson's commands for an RSemaphore (string NAME, channel
// redisson_sc:{NAME}, message the permits available) and an
// RCountDownLatch (string NAME, channel
// redisson_countdownlatch__channel__{NAME}, messages "0" and "1"),
// written here from their documented layout.

const (
	javaSemTryAcquire = `local v = redis.call('get', KEYS[1]); if v ~= false and tonumber(v) >= tonumber(ARGV[1]) then
redis.call('decrby', KEYS[1], ARGV[1]); return 1; end; return 0;`
	javaSemRelease    = `local v = redis.call('incrby', KEYS[1], ARGV[1]); redis.call(ARGV[2], KEYS[2], v);`
	javaLatchSetCount = `if redis.call('exists', KEYS[1]) == 0 then redis.call('set', KEYS[1], ARGV[2]); redis.call(ARGV[3], KEYS[2], ARGV[1]); return 1; end; return 0;`
	javaLatchDown     = `local v = redis.call('decr', KEYS[1]); if v <= 0 then redis.call('del', KEYS[1]) end; if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end;`
)

// javaSide is a Java thread of the simulator on one env.
type javaSide struct {
	rc  rueidis.Client
	pub string
}

func newJavaSide(t testing.TB, e *env) *javaSide {
	pub := "publish"
	if e.Cluster != nil {
		pub = "spublish"
	}
	return &javaSide{rc: e.RueidisClient(t), pub: pub}
}

func (j *javaSide) eval(ctx context.Context, script string, keys []string, args ...string) rueidis.RedisResult {
	return j.rc.Do(ctx, j.rc.B().Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
}

// await waits as Redisson's waiters do: subscribed to channel, it calls
// done after each message (or a second without one) until done reports
// true. subscribed, when not nil, is closed once the subscription is on.
func (j *javaSide) await(ctx context.Context, channel string, subscribed chan<- struct{}, done func() (bool, error)) error {
	return j.awaitFor(ctx, channel, subscribed, func() (bool, time.Duration, error) {
		ok, err := done()
		return ok, time.Second, err
	})
}

func (j *javaSide) semTry(ctx context.Context, name string) (bool, error) {
	n, err := j.eval(ctx, javaSemTryAcquire, []string{name}, "1").AsInt64()
	return n == 1, err
}

func (j *javaSide) semAcquire(ctx context.Context, name string, subscribed chan<- struct{}) error {
	return j.await(ctx, "redisson_sc:{"+name+"}", subscribed, func() (bool, error) { return j.semTry(ctx, name) })
}

func (j *javaSide) semRelease(ctx context.Context, name string) error {
	err := j.eval(ctx, javaSemRelease, []string{name, "redisson_sc:{" + name + "}"}, "1", j.pub).Error()
	if rueidis.IsRedisNil(err) {
		return nil
	}
	return err
}

func TestRedissonSemaphoreJavaSim(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		rounds := soak(10, 200)
		name := "rsem-" + e.Name
		ctx := withTimeout(t, 5*time.Minute)
		j := newJavaSide(t, e)
		sems := onClients(t, e, 2, func(c *Client) *Semaphore { return c.Semaphore(name) })
		ok, err := sems[0].TrySetPermits(ctx, 1)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = sems[1].TrySetPermits(ctx, 5)
		require.NoError(t, err)
		require.False(t, ok, "already set")

		// Wake-ups both ways, with the one permit.
		var goWakes, javaWakes []time.Duration
		for i := range rounds {
			ok, err := j.semTry(ctx, name)
			require.NoError(t, err)
			require.True(t, ok)
			waiting := sems[i%2].Acquire(ctx, 1)
			awaitGoWaiting(t, sems[i%2].c, "redisson_sc:{"+name+"}")
			sent := time.Now()
			require.NoError(t, j.semRelease(ctx, name))
			l := recv(t, waiting, 10*time.Second, "the Go waiter after a Java release")
			goWakes = append(goWakes, time.Since(sent))
			subscribed := make(chan struct{})
			done := make(chan time.Time, 1)
			go func() {
				if err := j.semAcquire(ctx, name, subscribed); err != nil {
					t.Error(err)
				}
				done <- time.Now()
			}()
			<-subscribed
			sent = time.Now()
			require.NoError(t, l.Unlock(ctx))
			select {
			case at := <-done:
				javaWakes = append(javaWakes, at.Sub(sent))
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: the Java waiter was not woken", i)
			}
			require.NoError(t, j.semRelease(ctx, name))
		}
		t.Logf("%s: Go semaphore waiter woken by a Java release: %s; Java waiter woken by a Go release: %s", e.Name,
			wakeStats(goWakes), wakeStats(javaWakes))
		require.Less(t, percentile(goWakes, 50), 250*time.Millisecond, "woken by the message, not the presence pass")
		require.Less(t, percentile(javaWakes, 50), 250*time.Millisecond, "woken by the message, not the poll")

		// Two permits among Go and Java holders: never more than two inside.
		_, err = sems[0].AddPermits(ctx, 1)
		require.NoError(t, err)
		var (
			mu                  sync.Mutex
			inside, most, count int
			wg                  sync.WaitGroup
		)
		critical := func() {
			mu.Lock()
			inside++
			most = max(most, inside)
			mu.Unlock()
			time.Sleep(200 * time.Microsecond)
			mu.Lock()
			inside--
			count++
			mu.Unlock()
		}
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					l, err := sems[i%2].Lock(ctx, 1)
					if err != nil {
						t.Error(err)
						return
					}
					critical()
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		for range 2 {
			j := newJavaSide(t, e)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					if err := j.semAcquire(ctx, name, nil); err != nil {
						t.Error(err)
						return
					}
					critical()
					if err := j.semRelease(ctx, name); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		t.Logf("%s: %d passes by 4 Go goroutines and 2 Java threads through 2 permits; at most %d inside", e.Name, count, most)
		require.LessOrEqual(t, most, 2, "never more holders than permits")
		require.Equal(t, 6*rounds, count)
		n, err := sems[0].AvailablePermits(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "every permit came back")
	})
}

func TestRedissonSemaphoreLease(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		name := "rsem-lease-" + e.Name
		c := e.client(t, redisync.WithWatchdogLease(600*time.Millisecond))
		s := c.Semaphore(name)
		_, err := s.TryLock(ctx, 1)
		require.ErrorIs(t, err, redisync.ErrNoPermits, "a semaphore never set has no permits")
		require.ErrorIs(t, err, redisync.ErrLocked)
		_, err = s.TryLock(ctx, 0)
		require.ErrorIs(t, err, redisync.ErrInvalidArgument)
		ok, err := s.TrySetPermits(ctx, 3)
		require.NoError(t, err)
		require.True(t, ok)

		// Permits are not leased: the redisync.Lease outlives its watchdog lease.
		l := mustLock(t, ctx, func(ctx context.Context) (*redisync.Lease, error) { return s.Lock(ctx, 2) })
		time.Sleep(time.Second)
		require.NoError(t, l.Err())
		_, err = s.TryLock(ctx, 2)
		require.ErrorIs(t, err, redisync.ErrNoPermits)
		require.NoError(t, l.Unlock(ctx))
		n, err := s.AvailablePermits(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 3, n)

		// Deleted under its holder: lost, and its Unlock gives nothing back.
		l = mustLock(t, ctx, func(ctx context.Context) (*redisync.Lease, error) { return s.Lock(ctx, 1) })
		rc := e.RueidisClient(t)
		require.NoError(t, rc.Do(ctx, rc.B().Del().Key(name).Build()).Error())
		select {
		case <-l.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("the holder did not see its semaphore deleted")
		}
		require.ErrorIs(t, l.Err(), redisync.ErrExpired)
		require.ErrorIs(t, l.Unlock(ctx), redisync.ErrNotHeld)
		exists, err := rc.Do(ctx, rc.B().Exists().Key(name).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, exists, "not brought back")

		// Close gives the permits back.
		c2 := e.client(t)
		_, err = c2.Semaphore(name).AddPermits(ctx, 2)
		require.NoError(t, err)
		mustLock(t, ctx, func(ctx context.Context) (*redisync.Lease, error) { return c2.Semaphore(name).Lock(ctx, 2) })
		require.NoError(t, c2.Close())
		n, err = s.AvailablePermits(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 2, n)

		// Wrong layout.
		for _, v := range []string{"x", "1.5"} {
			bad := "rsem-bad-" + v + "-" + e.Name
			require.NoError(t, rc.Do(ctx, rc.B().Set().Key(bad).Value(v).Build()).Error())
			_, err = c.Semaphore(bad).TryLock(ctx, 1)
			require.ErrorIs(t, err, redisync.ErrWrongType)
			_, err = c.Semaphore(bad).AddPermits(ctx, 1)
			require.ErrorIs(t, err, redisync.ErrWrongType)
		}
		hash := "rsem-hash-" + e.Name
		require.NoError(t, rc.Do(ctx, rc.B().Hset().Key(hash).FieldValue().FieldValue("a", "1").Build()).Error())
		_, err = c.Semaphore(hash).Lock(ctx, 1)
		require.ErrorIs(t, err, redisync.ErrWrongType)
		_, err = c.Semaphore(hash).AvailablePermits(ctx)
		require.ErrorIs(t, err, redisync.ErrWrongType)
	})
}

func TestRedissonCountDownLatchJavaSim(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		rounds := soak(10, 200)
		name := "rlatch-" + e.Name
		channel := "redisson_countdownlatch__channel__{" + name + "}"
		ctx := withTimeout(t, 5*time.Minute)
		j := newJavaSide(t, e)
		l := e.client(t).CountDownLatch(name)
		n, err := l.Count(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "a latch never set is open")
		require.NoError(t, l.Wait(ctx))

		var goWakes, javaWakes []time.Duration
		for i := range rounds {
			// Java sets the count and counts down to zero; a Go waiter
			// wakes.
			ok, err := j.eval(ctx, javaLatchSetCount, []string{name, channel}, "1", "2", j.pub).AsInt64()
			require.NoError(t, err)
			require.EqualValues(t, 1, ok)
			ok2, err := l.TrySetCount(ctx, 5)
			require.NoError(t, err)
			require.False(t, ok2, "already set")
			done := make(chan time.Time, 1)
			go func() {
				if err := l.Wait(ctx); err != nil {
					t.Error(err)
				}
				done <- time.Now()
			}()
			awaitGoWaiting(t, l.c, channel)
			require.NoError(t, ignoreNil(j.eval(ctx, javaLatchDown, []string{name, channel}, "0", j.pub).Error()))
			select {
			case <-done:
				t.Fatalf("round %d: the Go waiter returned at a count of 1", i)
			case <-time.After(20 * time.Millisecond):
			}
			sent := time.Now()
			require.NoError(t, ignoreNil(j.eval(ctx, javaLatchDown, []string{name, channel}, "0", j.pub).Error()))
			select {
			case at := <-done:
				goWakes = append(goWakes, at.Sub(sent))
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: the Go waiter was not woken", i)
			}
			require.Zero(t, redissonWaiters(l.c, channel), "the Go waiter left its subscription")

			// Go sets and counts down; a Java waiter wakes.
			ok2, err = l.TrySetCount(ctx, 1)
			require.NoError(t, err)
			require.True(t, ok2)
			subscribed := make(chan struct{})
			jdone := make(chan time.Time, 1)
			go func() {
				err := j.await(ctx, channel, subscribed, func() (bool, error) {
					n, err := j.rc.Do(ctx, j.rc.B().Get().Key(name).Build()).AsInt64()
					if rueidis.IsRedisNil(err) {
						return true, nil
					}
					return n <= 0, err
				})
				if err != nil {
					t.Error(err)
				}
				jdone <- time.Now()
			}()
			<-subscribed
			sent = time.Now()
			n, err := l.CountDown(ctx)
			require.NoError(t, err)
			require.Zero(t, n)
			select {
			case at := <-jdone:
				javaWakes = append(javaWakes, at.Sub(sent))
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: the Java waiter was not woken", i)
			}
		}
		t.Logf("%s: Go latch waiter woken by a Java countDown: %s; Java waiter woken by a Go CountDown: %s", e.Name,
			wakeStats(goWakes), wakeStats(javaWakes))
		require.Less(t, percentile(goWakes, 50), 250*time.Millisecond, "woken by the message, not the presence pass")
		require.Less(t, percentile(javaWakes, 50), 250*time.Millisecond, "woken by the message, not the poll")

		// Delete opens it; a wrong layout is refused.
		ok, err := l.TrySetCount(ctx, 3)
		require.NoError(t, err)
		require.True(t, ok)
		found, err := l.Delete(ctx)
		require.NoError(t, err)
		require.True(t, found)
		require.NoError(t, l.Wait(ctx))
		rc := e.RueidisClient(t)
		bad := "rlatch-bad-" + e.Name
		require.NoError(t, rc.Do(ctx, rc.B().Lpush().Key(bad).Element("1").Build()).Error())
		bl := e.client(t).CountDownLatch(bad)
		require.ErrorIs(t, bl.Wait(ctx), redisync.ErrWrongType)
		_, err = bl.CountDown(ctx)
		require.ErrorIs(t, err, redisync.ErrWrongType)
		_, err = bl.TrySetCount(ctx, 1)
		require.ErrorIs(t, err, redisync.ErrWrongType)
		_, err = bl.TrySetCount(ctx, 0)
		require.ErrorIs(t, err, redisync.ErrInvalidArgument)
		if e.Cluster != nil {
			_, err = e.client(t).CountDownLatch("a{b}c").Count(ctx)
			require.ErrorIs(t, err, redisync.ErrInvalidArgument)
		}
	})
}

func ignoreNil(err error) error {
	if rueidis.IsRedisNil(err) {
		return nil
	}
	return err
}

// InspectSemaphore and InspectCountDownLatch read the
// string NAME as the kind the caller names, changing nothing.
func TestInspectRedissonSemaphoreAndLatch(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		rc := e.RueidisClient(t)
		c := e.client(t)
		name := "rsem-inspect-" + e.Name
		st, err := InspectSemaphore(ctx, rc, name)
		require.NoError(t, err)
		require.False(t, st.Exists)
		require.Zero(t, st.Available)
		_, err = c.Semaphore(name).TrySetPermits(ctx, 3)
		require.NoError(t, err)
		l := mustLock(t, ctx, func(ctx context.Context) (*redisync.Lease, error) { return c.Semaphore(name).Lock(ctx, 2) })
		st, err = InspectSemaphore(ctx, rc, name)
		require.NoError(t, err)
		require.Equal(t, SemaphoreState{Exists: true, Available: 1, TTL: -time.Millisecond}, st)
		require.NoError(t, l.Unlock(ctx))
		require.NoError(t, rc.Do(ctx, rc.B().Pexpire().Key(name).Milliseconds(60000).Build()).Error())
		st, err = InspectSemaphore(ctx, rc, name)
		require.NoError(t, err)
		require.EqualValues(t, 3, st.Available)
		require.Greater(t, st.TTL, 50*time.Second)

		latch := "rlatch-inspect-" + e.Name
		ls, err := InspectCountDownLatch(ctx, rc, latch)
		require.NoError(t, err)
		require.Zero(t, ls.Count, "a latch never set is open")
		_, err = c.CountDownLatch(latch).TrySetCount(ctx, 2)
		require.NoError(t, err)
		ls, err = InspectCountDownLatch(ctx, rc, latch)
		require.NoError(t, err)
		require.Equal(t, CountDownLatchState{Count: 2, TTL: -time.Millisecond}, ls)

		hash := "rsem-inspect-hash-" + e.Name
		require.NoError(t, rc.Do(ctx, rc.B().Hset().Key(hash).FieldValue().FieldValue("a", "1").Build()).Error())
		_, err = InspectSemaphore(ctx, rc, hash)
		require.ErrorIs(t, err, redisync.ErrWrongType)
		_, err = InspectCountDownLatch(ctx, rc, hash)
		require.ErrorIs(t, err, redisync.ErrWrongType)
		_, err = InspectSemaphore(ctx, nil, name)
		require.ErrorIs(t, err, redisync.ErrInvalidArgument)
		_, err = InspectCountDownLatch(ctx, rc, "")
		require.ErrorIs(t, err, redisync.ErrInvalidArgument)
		require.NoError(t, rc.Do(ctx, rc.B().Del().Key(name).Build()).Error())
		require.NoError(t, rc.Do(ctx, rc.B().Del().Key(latch).Build()).Error())
		require.NoError(t, rc.Do(ctx, rc.B().Del().Key(hash).Build()).Error())
	})
}
