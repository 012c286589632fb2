package redisson

import (
	"context"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync"
)

// A Redisson-side simulator: the commands Redisson 3.x (3.24.1 and later)
// sends for an RLock, written here from its documented layout, with the
// publishing command Redisson picks (SPUBLISH on a Cluster with sharded
// pub/sub, from 3.22.0; PUBLISH elsewhere). It stands for a Java service
// where node-redisson cannot: sharded pub/sub on Cluster, Redisson's
// default there.

const (
	javaTryLock = `if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end;
return redis.call('pttl', KEYS[1]);`
	javaUnlock = `local val = redis.call('get', KEYS[3]); if val ~= false then return tonumber(val); end;
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); redis.call('set', KEYS[3], 0, 'px', ARGV[5]); return 0;
else redis.call('del', KEYS[1]); redis.call(ARGV[4], KEYS[2], ARGV[1]); redis.call('set', KEYS[3], 1, 'px', ARGV[5]); return 1; end;`
)

// javaRLock is one Java thread's RLock.
type javaRLock struct {
	rc    rueidis.Client
	name  string
	field string // uuid:threadId
	pub   string // "publish" or "spublish"
	lease time.Duration
}

func newJavaRLock(t testing.TB, e *env, name string) *javaRLock {
	pub := "publish"
	if e.Cluster != nil {
		pub = "spublish"
	}
	return &javaRLock{rc: e.RueidisClient(t), name: name, field: uuid.NewString() + ":1", pub: pub, lease: 30 * time.Second}
}

func (j *javaRLock) channel() string { return "redisson_lock__channel:{" + j.name + "}" }

// tryLock is one attempt: acquired, or the lock's PTTL.
func (j *javaRLock) tryLock(ctx context.Context) (bool, time.Duration, error) {
	ttl, err := j.rc.Do(ctx, j.rc.B().Eval().Script(javaTryLock).Numkeys(1).Key(j.name).
		Arg(strconv.FormatInt(j.lease.Milliseconds(), 10), j.field).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return true, 0, nil
	}
	return false, time.Duration(ttl) * time.Millisecond, err
}

// lock waits as Redisson does: subscribed to the channel (sharded where
// Redisson publishes sharded), attempting after each message or the
// lock's TTL. It returns when it took the lock.
func (j *javaRLock) lock(ctx context.Context, subscribed chan<- struct{}) error {
	return javaAwait(ctx, j.rc, j.pub, j.channel(), subscribed, func() (bool, time.Duration, error) {
		ok, ttl, err := j.tryLock(ctx)
		if ttl <= 0 {
			ttl = time.Second
		}
		return ok, ttl, err
	})
}

// unlock sends Redisson's unlock with a fresh request id and deletes the
// latch after, as Redisson does: 1 freed, 0 still held, nil not held.
func (j *javaRLock) unlock(ctx context.Context) (rueidis.RedisResult, error) {
	latch := "redisson_unlock_latch:{" + j.name + "}:" + redissonRequestID()
	r := j.rc.Do(ctx, j.rc.B().Eval().Script(javaUnlock).Numkeys(3).Key(j.name, j.channel(), latch).
		Arg("0", strconv.FormatInt(j.lease.Milliseconds(), 10), j.field, j.pub, "20000").Build())
	if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
		return r, err
	}
	return r, j.rc.Do(ctx, j.rc.B().Del().Key(latch).Build()).Error()
}

// javaPubModes are the ways a Java fleet may publish and subscribe on e:
// classic pub/sub (Redisson before 3.22.0, shardedSubscriptionMode OFF,
// standalone Redis) and sharded (Redisson's default on a Cluster of Redis
// 7), which every server of the project's tests has.
var javaPubModes = []string{"publish", "spublish"}

// Go Clients with the default settings wake Java waiters that subscribe
// either way, and are woken by Java releases that publish either way, by
// the message (p50 within 10 ms), on standalone and on Cluster.
func TestRedissonJavaSimWakeUp(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		rl0 := e.client(t)
		for _, pub := range javaPubModes {
			t.Run(pub, func(t *testing.T) {
				rounds := soak(10, 200)
				name := "java-wake-" + pub + "-" + e.Name
				ctx := withTimeout(t, 5*time.Minute)
				j := newJavaRLock(t, e, name)
				j.pub = pub
				rl := rl0.Lock(name)
				goWakes, javaWakes := javaWakeRounds(t, ctx, j, rl, rounds)
				t.Logf("%s, Java on %s: Go waiter woken by a Java unlock: %s; Java waiter woken by a Go unlock: %s", e.Name, pub,
					wakeStats(goWakes), wakeStats(javaWakes))
				require.LessOrEqual(t, percentile(goWakes, 50), 10*time.Millisecond, "the Go waiter is woken by the message")
				require.LessOrEqual(t, percentile(javaWakes, 50), 10*time.Millisecond, "the Java waiter is woken by the message")
			})
		}
	})
}

// javaWakeRounds hands the lock rl over from the Java side j to a Go
// waiter, then from Go to a Java waiter, rounds times each way, and
// returns how long each waiter took to get it after the release was sent.
func javaWakeRounds(t *testing.T, ctx context.Context, j *javaRLock, rl *Lock, rounds int) (goWakes, javaWakes []time.Duration) {
	for i := range rounds {
		ok, _, err := j.tryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		got := lockedAt(t, ctx, rl.Lock)
		awaitGoWaiting(t, rl.c, j.channel())
		sent := time.Now()
		r, err := j.unlock(ctx)
		require.NoError(t, err)
		n, _ := r.AsInt64()
		require.EqualValues(t, 1, n, "round %d", i)
		goWakes = append(goWakes, (<-got).Sub(sent))
		require.Zero(t, redissonWaiters(rl.c, j.channel()), "the Go waiter left its subscription")
	}
	for i := range rounds {
		l := mustLock(t, ctx, rl.Lock)
		subscribed := make(chan struct{})
		done := make(chan error, 1)
		var at time.Time
		// A waiter the message missed waits out the Go holder's lease.
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		go func() {
			err := j.lock(rctx, subscribed)
			at = time.Now()
			done <- err
		}()
		<-subscribed
		sent := time.Now()
		require.NoError(t, l.Unlock(ctx))
		err := <-done
		cancel()
		require.NoError(t, err, "round %d: the Java waiter was not woken", i)
		javaWakes = append(javaWakes, at.Sub(sent))
		r, err := j.unlock(ctx)
		require.NoError(t, err)
		n, _ := r.AsInt64()
		require.EqualValues(t, 1, n)
	}
	return goWakes, javaWakes
}

// lockedAt takes a lease with lock on a goroutine, and delivers when it got
// it; the lease is unlocked before that, so before the next round's Java
// lock.
func lockedAt(t *testing.T, ctx context.Context, lock func(context.Context) (*redisync.Lease, error)) <-chan time.Time {
	got := make(chan time.Time, 1)
	go func() {
		l, err := lock(ctx)
		at := time.Now()
		if err == nil {
			l.Unlock(ctx)
		} else {
			t.Error(err)
		}
		got <- at
	}()
	return got
}

// A Java holder's hold and a Go holder's exclude each other, and either
// side's unlock is refused for a lock the other holds.
func TestRedissonJavaSimExclusion(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		name := "java-excl-" + e.Name
		ctx := withTimeout(t, time.Minute)
		j := newJavaRLock(t, e, name)
		rl := e.client(t).Lock(name)
		ok, _, err := j.tryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		_, err = rl.TryLock(ctx)
		require.ErrorIs(t, err, redisync.ErrLocked)
		st, err := rl.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, []Holder{{Owner: j.field, Holds: 1}}, st.Holders)
		r, err := j.unlock(ctx)
		require.NoError(t, err)
		n, err := r.AsInt64()
		require.NoError(t, err)
		require.EqualValues(t, 1, n)

		l := mustLock(t, ctx, rl.TryLock)
		ok, ttl, err := j.tryLock(ctx)
		require.NoError(t, err)
		require.False(t, ok)
		require.Greater(t, ttl, 20*time.Second, "Java waits at most the Go holder's lease")
		r, err = j.unlock(ctx)
		require.NoError(t, err)
		require.True(t, rueidis.IsRedisNil(r.Error()), "Java's unlock of a lock Go holds is refused (IllegalMonitorStateException)")
		require.NoError(t, l.Err())
		require.NoError(t, l.Unlock(ctx))
	})
}

// The Java side of Redisson's permit expirable semaphore in the simulator:
// Redisson's commands for an RPermitExpirableSemaphore, written here from
// its documented layout (string NAME, permits available; zset
// {NAME}:timeout, member a permit id's 16 raw bytes, score its expiry in
// ms of the Java host's clock, or 922337203685477 for no lease; channel
// redisson_sc:{NAME}, message the permits available). Java sends the ids
// as bytes and shows them as 32 hex digits; it passes its own clock's now.
const (
	// KEYS: NAME, zset, channel. ARGV: permits, expiry, now, no-lease
	// score, publish command, ids. Reply: "OK", ":<nearest expiry>" or nil.
	javaPSemTryAcquire = `local gone = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1])
if #gone > 0 then
  for _, g in ipairs(gone) do redis.call('zrem', KEYS[2], g) end
  local now = redis.call('incrby', KEYS[1], #gone)
  if tonumber(now) > 0 then redis.call(ARGV[5], KEYS[3], now) end
end
local have = redis.call('get', KEYS[1])
if have ~= false and tonumber(have) >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  for i = 6, #ARGV do redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]) end
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then redis.call('pexpire', KEYS[2], ttl) end
  return 'OK'
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if first[1] ~= nil and first[2] ~= ARGV[4] then return ':' .. first[2] end
return nil`
	// KEYS: NAME, channel, zset. ARGV: id, 1, now, publish command.
	// Reply: 1 released, 0 unknown or expired (an expired one is given
	// back all the same).
	javaPSemTryRelease = `local ends = redis.call('zscore', KEYS[3], ARGV[1])
if redis.call('zrem', KEYS[3], ARGV[1]) ~= 1 then return 0 end
local now = redis.call('incrby', KEYS[1], ARGV[2])
redis.call(ARGV[4], KEYS[2], now)
if tonumber(ends) <= tonumber(ARGV[3]) then return 0 end
return 1`
)

// javaNoLease is the score of a Java permit without lease.
const javaNoLease = "922337203685477"

// javaPSem is a Java thread's RPermitExpirableSemaphore.
type javaPSem struct {
	*javaSide
	name string
}

func newJavaPSem(t testing.TB, e *env, name string) *javaPSem {
	return &javaPSem{javaSide: newJavaSide(t, e), name: name}
}

func (j *javaPSem) keys() []string {
	return []string{j.name, "{" + j.name + "}:timeout", "redisson_sc:{" + j.name + "}"}
}

// tryAcquire is one attempt at n permits with lease (negative: none). It
// returns the ids taken, or the time until the nearest expiry (negative:
// none known).
func (j *javaPSem) tryAcquire(ctx context.Context, n int, lease time.Duration) ([]string, time.Duration, error) {
	now := time.Now().UnixMilli()
	until := javaNoLease
	if lease >= 0 {
		until = strconv.FormatInt(now+lease.Milliseconds(), 10)
	}
	ids := make([]string, n)
	args := []string{strconv.Itoa(n), until, strconv.FormatInt(now, 10), javaNoLease, j.pub}
	for i := range ids {
		ids[i] = redissonRequestID()
		raw, _ := hex.DecodeString(ids[i])
		args = append(args, string(raw))
	}
	s, err := j.eval(ctx, javaPSemTryAcquire, j.keys(), args...).ToString()
	switch {
	case rueidis.IsRedisNil(err):
		return nil, -1, nil
	case err != nil:
		return nil, 0, err
	case s == "OK":
		return ids, 0, nil
	}
	at, err := strconv.ParseFloat(strings.TrimPrefix(s, ":"), 64)
	if err != nil {
		return nil, 0, err
	}
	return nil, time.Duration(int64(at)-time.Now().UnixMilli()) * time.Millisecond, nil
}

// acquire waits as Redisson does: subscribed to the channel, attempting
// after each message, or once the nearest permit expires. subscribed,
// when not nil, is closed once the subscription is on.
func (j *javaPSem) acquire(ctx context.Context, n int, lease time.Duration, subscribed chan<- struct{}) ([]string, error) {
	var ids []string
	next := time.Hour
	err := j.awaitFor(ctx, j.keys()[2], subscribed, func() (bool, time.Duration, error) {
		got, nearest, err := j.tryAcquire(ctx, n, lease)
		ids = got
		if nearest < 0 {
			nearest = next
		}
		return got != nil, max(nearest, time.Millisecond), err
	})
	return ids, err
}

// release is Java's tryRelease(id): whether the permit was held.
func (j *javaPSem) release(ctx context.Context, id string) (bool, error) {
	raw, err := hex.DecodeString(id)
	if err != nil {
		return false, err
	}
	n, err := j.eval(ctx, javaPSemTryRelease, []string{j.name, j.keys()[2], j.keys()[1]},
		string(raw), "1", strconv.FormatInt(time.Now().UnixMilli(), 10), j.pub).AsInt64()
	return n == 1, err
}

// awaitFor is await whose done also says how long to wait at most before
// the next look.
func (j *javaSide) awaitFor(ctx context.Context, channel string, subscribed chan<- struct{}, done func() (bool, time.Duration, error)) error {
	return javaAwait(ctx, j.rc, j.pub, channel, subscribed, done)
}

// javaAwait waits as Redisson's waiters do: subscribed to channel (sharded
// when its publishers use "spublish"), it calls done after each message,
// or once the wait done gave ran out without one, until done reports true.
// subscribed, when not nil, is closed once the subscription is on.
func javaAwait(ctx context.Context, rc rueidis.Client, pub, channel string, subscribed chan<- struct{}, done func() (bool, time.Duration, error)) error {
	dc, cancel := rc.Dedicate()
	defer cancel()
	defer dc.Close()
	msgs := make(chan struct{}, 1)
	dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(rueidis.PubSubMessage) {
		select {
		case msgs <- struct{}{}:
		default:
		}
	}})
	sub := dc.B().Subscribe().Channel(channel).Build()
	if pub == "spublish" {
		sub = dc.B().Ssubscribe().Channel(channel).Build()
	}
	if err := dc.Do(ctx, sub).Error(); err != nil {
		return err
	}
	if subscribed != nil {
		close(subscribed)
	}
	for {
		ok, wait, err := done()
		if err != nil || ok {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-msgs:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}
