package redisson

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync"
)

// The Java side of Redisson's fair lock in the simulator: the commands
// Redisson sends for an RFairLock, written here from its documented
// layout (redisson_lock_queue:{NAME}, redisson_lock_timeout:{NAME}, a
// channel per waiter), with Java's clock in ARGV.

const (
	javaFairPurge = `while true do local h = redis.call('lindex', KEYS[2], 0); if h == false then break end;
local s = redis.call('zscore', KEYS[3], h); if s ~= false and tonumber(s) <= tonumber(ARGV[4]) then
redis.call('zrem', KEYS[3], h); redis.call('lpop', KEYS[2]); else break end; end;`
	// javaFairTryLock: ARGV lease, field, wait, now, '1' to queue. Returns
	// nil when taken, else a TTL.
	javaFairTryLock = javaFairPurge + `
if redis.call('exists', KEYS[1]) == 0 and (redis.call('exists', KEYS[2]) == 0 or redis.call('lindex', KEYS[2], 0) == ARGV[2]) then
redis.call('lpop', KEYS[2]); redis.call('zrem', KEYS[3], ARGV[2]);
local ks = redis.call('zrange', KEYS[3], 0, -1); for i = 1, #ks do redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), ks[i]) end;
redis.call('hset', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end;
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end;
if ARGV[5] ~= '1' then return 1 end;
if redis.call('zscore', KEYS[3], ARGV[2]) ~= false then return math.max(0, redis.call('pttl', KEYS[1])) end;
local last = redis.call('lindex', KEYS[2], -1); local ttl;
if last ~= false and last ~= ARGV[2] and redis.call('zscore', KEYS[3], last) ~= false then ttl = tonumber(redis.call('zscore', KEYS[3], last)) - tonumber(ARGV[4]);
else ttl = redis.call('pttl', KEYS[1]) end;
if redis.call('zadd', KEYS[3], ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]), ARGV[2]) == 1 then redis.call('rpush', KEYS[2], ARGV[2]) end;
return ttl;`
	// javaFairUnlock: KEYS lock, queue, timeouts, channel, latch; ARGV
	// lease, field, pub command, now. 1 freed (or found free), 0 still
	// held, nil not held.
	javaFairUnlock = `local val = redis.call('get', KEYS[5]); if val ~= false then return tonumber(val) end;` + javaFairPurge + `
if redis.call('exists', KEYS[1]) == 0 then local n = redis.call('lindex', KEYS[2], 0);
if n ~= false then redis.call(ARGV[3], KEYS[4] .. ':' .. n, '0') end; redis.call('set', KEYS[5], 1, 'px', 20000); return 1; end;
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end;
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then redis.call('pexpire', KEYS[1], ARGV[1]); redis.call('set', KEYS[5], 0, 'px', 20000); return 0 end;
redis.call('del', KEYS[1]); redis.call('set', KEYS[5], 1, 'px', 20000);
local n = redis.call('lindex', KEYS[2], 0); if n ~= false then redis.call(ARGV[3], KEYS[4] .. ':' .. n, '0') end; return 1;`
	// javaFairForce: ARGV pub command, now.
	javaFairForce = javaFairPurge + `
if redis.call('del', KEYS[1]) == 1 then local n = redis.call('lindex', KEYS[2], 0);
if n ~= false then redis.call(ARGV[3], KEYS[4] .. ':' .. n, '0') end; return 1 end; return 0;`
)

// javaFair is one Java thread's RFairLock.
type javaFair struct {
	rc    rueidis.Client
	name  string
	field string
	pub   string
	lease time.Duration
	wait  time.Duration
}

func newJavaFair(t testing.TB, e *env, name string) *javaFair {
	pub := "publish"
	if e.Cluster != nil {
		pub = "spublish"
	}
	return &javaFair{rc: e.RueidisClient(t), name: name, field: uuid.NewString() + ":1", pub: pub, lease: 30 * time.Second, wait: time.Minute}
}

func (j *javaFair) keys() []string {
	return []string{j.name, "redisson_lock_queue:{" + j.name + "}", "redisson_lock_timeout:{" + j.name + "}", "redisson_lock__channel:{" + j.name + "}"}
}

func (j *javaFair) channel() string { return j.keys()[3] + ":" + j.field }

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// tryLock is one attempt, queueing when queue: acquired, or a TTL.
func (j *javaFair) tryLock(ctx context.Context, queue bool) (bool, time.Duration, error) {
	q := "0"
	if queue {
		q = "1"
	}
	ttl, err := j.rc.Do(ctx, j.rc.B().Eval().Script(javaFairTryLock).Numkeys(3).Key(j.keys()[:3]...).
		Arg(ms(j.lease), j.field, ms(j.wait), nowMs(), q).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return true, 0, nil
	}
	return false, time.Duration(ttl) * time.Millisecond, err
}

// lock waits as Redisson does: subscribed to its own channel, attempting
// after each message or the TTL it was given. subscribed is closed once
// its first attempt queued it.
func (j *javaFair) lock(ctx context.Context, subscribed chan<- struct{}) error {
	first := true
	return javaAwait(ctx, j.rc, j.pub, j.channel(), nil, func() (bool, time.Duration, error) {
		ok, ttl, err := j.tryLock(ctx, true)
		if first && err == nil && !ok && subscribed != nil {
			close(subscribed)
		}
		first = false
		if ttl <= 0 {
			ttl = time.Second
		}
		return ok, ttl, err
	})
}

func (j *javaFair) unlock(ctx context.Context) (rueidis.RedisResult, error) {
	latch := "redisson_unlock_latch:{" + j.name + "}:" + redissonRequestID()
	r := j.rc.Do(ctx, j.rc.B().Eval().Script(javaFairUnlock).Numkeys(5).Key(append(j.keys(), latch)...).
		Arg(ms(j.lease), j.field, j.pub, nowMs()).Build())
	if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
		return r, err
	}
	return r, j.rc.Do(ctx, j.rc.B().Del().Key(latch).Build()).Error()
}

func (j *javaFair) mustUnlock(t testing.TB, ctx context.Context) {
	t.Helper()
	r, err := j.unlock(ctx)
	require.NoError(t, err)
	n, err := r.AsInt64()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

func (j *javaFair) forceUnlock(ctx context.Context) (bool, error) {
	n, err := j.rc.Do(ctx, j.rc.B().Eval().Script(javaFairForce).Numkeys(4).Key(j.keys()...).Arg(j.pub, nowMs()).Build()).AsInt64()
	return n == 1, err
}

// queue reads the fair lock's queue.
func (j *javaFair) queue(t testing.TB) []string {
	t.Helper()
	q, err := j.rc.Do(context.Background(), j.rc.B().Lrange().Key(j.keys()[1]).Start(0).Stop(-1).Build()).AsStrSlice()
	require.NoError(t, err)
	return q
}

// Java and Go waiters are served in their order of arrival, each woken by
// the other side's unlock on its own channel.
func TestRedissonFairJavaSimOrder(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		rounds := soak(10, 200)
		name := "fair-order-" + e.Name
		ctx := withTimeout(t, 5*time.Minute)
		j := newJavaFair(t, e, name)
		c := e.client(t)
		fl := c.FairLock(name)
		var javaWakes, goWakes []time.Duration
		for i := range rounds {
			holder := mustLock(t, ctx, fl.Lock)
			// Java queues first, then a Go waiter.
			subscribed := make(chan struct{})
			jdone := make(chan time.Time, 1)
			go func() {
				if err := j.lock(ctx, subscribed); err != nil {
					t.Error(err)
				}
				jdone <- time.Now()
			}()
			<-subscribed
			awaitSubscribers(t, e, j.channel(), 1)
			waiting := e.client(t).FairLock(name).Acquire(ctx)
			eventually(t, 10*time.Second, func() bool { return len(j.queue(t)) == 2 }, "two waiters queued")
			q := j.queue(t)
			require.Equal(t, j.field, q[0], "round %d: Java came first", i)
			awaitSubscribers(t, e, "redisson_lock__channel:{"+name+"}:"+q[1], 1)

			sent := time.Now()
			require.NoError(t, holder.Unlock(ctx))
			select {
			case at := <-jdone:
				javaWakes = append(javaWakes, at.Sub(sent))
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: the Java waiter was not woken", i)
			}
			select {
			case l := <-waiting:
				t.Fatalf("round %d: the Go waiter passed the Java one ahead of it: %v", i, l.Err())
			case <-time.After(20 * time.Millisecond):
			}
			sent = time.Now()
			j.mustUnlock(t, ctx)
			gl := recv(t, waiting, 10*time.Second, "the Go waiter after the Java unlock")
			goWakes = append(goWakes, time.Since(sent))
			require.NoError(t, gl.Err())
			require.Empty(t, j.queue(t))
			require.NoError(t, gl.Unlock(ctx))
		}
		t.Logf("%s: Java fair waiter woken by a Go unlock: %s; Go fair waiter woken by a Java unlock: %s", e.Name,
			wakeStats(javaWakes), wakeStats(goWakes))
		require.Less(t, percentile(goWakes, 50), 250*time.Millisecond, "woken by the message, not the presence pass")
		require.Less(t, slices.Max(javaWakes), 5*time.Second, "the Java waiter got the message, not its 30 s TTL")
	})
}

// Go and Java holders of one fair lock exclude each other under
// contention: no overlap, no lost update.
func TestRedissonFairJavaSimExclusion(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const rounds = 10
		name := "fair-excl-" + e.Name
		ctx := withTimeout(t, time.Minute)
		locks := onClients(t, e, 2, func(c *Client) *FairLock { return c.FairLock(name) })
		var (
			mu              sync.Mutex
			inside, overlap int
			count           int
			wg              sync.WaitGroup
		)
		critical := func() {
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
		}
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					l, err := locks[i%2].Lock(ctx)
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
			j := newJavaFair(t, e, name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					if err := j.lock(ctx, nil); err != nil {
						t.Error(err)
						return
					}
					critical()
					if r, err := j.unlock(ctx); err != nil || r.Error() != nil {
						t.Error(err, r.Error())
						return
					}
				}
			}()
		}
		wg.Wait()
		t.Logf("%s: %d increments by 4 Go goroutines on 2 Clients and 2 Java threads; %d overlaps", e.Name, count, overlap)
		require.Zero(t, overlap)
		require.Equal(t, 6*rounds, count, "no lost update")
		require.Empty(t, newJavaFair(t, e, name).queue(t), "nobody left in the queue")
	})
}

func TestRedissonFairLock(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		name := "fair-" + e.Name
		j := newJavaFair(t, e, name)
		c := e.client(t, redisync.WithWatchdogLease(600*time.Millisecond))
		fl := c.FairLock(name)

		// Re-entry: one field, two holds.
		l := mustLock(t, ctx, fl.Lock)
		inner := mustLock(t, l.Context(), fl.Lock)
		st, err := fl.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, []Holder{{Owner: ownerOf(l), Holds: 2}}, st.Holders)
		require.NoError(t, inner.Unlock(ctx))

		// The watchdog renews the lease, as Java sees it: still held, and
		// Java queues behind it.
		time.Sleep(1500 * time.Millisecond)
		require.NoError(t, l.Err())
		ok, ttl, err := j.tryLock(ctx, true)
		require.NoError(t, err)
		require.False(t, ok)
		require.Positive(t, ttl)
		require.Equal(t, []string{j.field}, j.queue(t))

		// A waiter in the queue keeps a free lock from a TryLock, and from a
		// Go waiter that came after it.
		require.NoError(t, l.Unlock(ctx))
		_, err = e.client(t).FairLock(name).TryLock(ctx)
		require.ErrorIs(t, err, redisync.ErrLocked, "the Java waiter is first")
		// A Go waiter that gives up leaves the queue, and the timeout of
		// the one behind it comes forward by its wait.
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		gone := e.client(t).FairLock(name).Acquire(short)
		eventually(t, 5*time.Second, func() bool { return len(j.queue(t)) == 2 }, "the Go waiter queued")
		j2 := newJavaFair(t, e, name)
		ok, _, err = j2.tryLock(ctx, true)
		require.NoError(t, err)
		require.False(t, ok)
		before, err := j.rc.Do(ctx, j.rc.B().Zscore().Key(j.keys()[2]).Member(j2.field).Build()).AsFloat64()
		require.NoError(t, err)
		gl := delivered(t, gone)
		cancel()
		require.ErrorIs(t, gl.Err(), context.DeadlineExceeded)
		require.Equal(t, []string{j.field, j2.field}, j.queue(t))
		after, err := j.rc.Do(ctx, j.rc.B().Zscore().Key(j.keys()[2]).Member(j2.field).Build()).AsFloat64()
		require.NoError(t, err)
		require.Less(t, after, before, "the timeout behind came forward")
		ok, _, err = j.tryLock(ctx, true)
		require.NoError(t, err)
		require.True(t, ok, "the head takes the free lock")
		j.mustUnlock(t, ctx)
		ok, _, err = j2.tryLock(ctx, true)
		require.NoError(t, err)
		require.True(t, ok)
		j2.mustUnlock(t, ctx)

		// Java's forced unlock is a loss to the Go holder.
		l = mustLock(t, ctx, fl.Lock)
		found, err := j.forceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, found)
		select {
		case <-l.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("the Go holder did not see its fair lock force-unlocked")
		}
		require.ErrorIs(t, l.Err(), redisync.ErrExpired)
		require.ErrorIs(t, l.Unlock(ctx), redisync.ErrNotHeld)

		// Go's forced unlock of a Java holder.
		ok, _, err = j.tryLock(ctx, true)
		require.NoError(t, err)
		require.True(t, ok)
		found, err = fl.ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, found)
		r, err := j.unlock(ctx)
		require.NoError(t, err)
		n, _ := r.AsInt64()
		require.EqualValues(t, 1, n, "Redisson's fair unlock of a free lock succeeds")
		require.Empty(t, e.Keys(t, "redisson_unlock_latch:*"))
	})
}

func TestRedissonFairLockWrongLayout(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		rc := e.RueidisClient(t)
		str, rw, badq := "fair-string-"+e.Name, "fair-rw-"+e.Name, "fair-badq-"+e.Name
		require.NoError(t, rc.Do(ctx, rc.B().Set().Key(str).Value("5").Build()).Error())
		require.NoError(t, rc.Do(ctx, rc.B().Hset().Key(rw).FieldValue().FieldValue("mode", "read").Build()).Error())
		require.NoError(t, rc.Do(ctx, rc.B().Set().Key("redisson_lock_queue:{"+badq+"}").Value("x").Build()).Error())
		for _, name := range []string{str, rw, badq} {
			_, err := c.FairLock(name).TryLock(ctx)
			require.ErrorIs(t, err, redisync.ErrWrongType, name)
			_, err = c.FairLock(name).Lock(ctx)
			require.ErrorIs(t, err, redisync.ErrWrongType, name)
			_, err = c.FairLock(name).ForceUnlock(ctx)
			require.ErrorIs(t, err, redisync.ErrWrongType, name)
		}
		n, err := rc.Do(ctx, rc.B().Exists().Key(badq).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, n, "not taken")
		_, err = c.FairLock("x", WithFairWait(0)).TryLock(ctx)
		require.ErrorIs(t, err, redisync.ErrInvalidArgument)
	})
}
