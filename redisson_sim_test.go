package redisync

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
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
	if e.cluster != nil {
		pub = "spublish"
	}
	return &javaRLock{rc: e.rueidisClient(t), name: name, field: uuid.NewString() + ":1", pub: pub, lease: 30 * time.Second}
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
	dc, cancel := j.rc.Dedicate()
	defer cancel()
	defer dc.Close()
	msgs := make(chan struct{}, 1)
	dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(rueidis.PubSubMessage) {
		select {
		case msgs <- struct{}{}:
		default:
		}
	}})
	sub := dc.B().Subscribe().Channel(j.channel()).Build()
	if j.pub == "spublish" {
		sub = dc.B().Ssubscribe().Channel(j.channel()).Build()
	}
	if err := dc.Do(ctx, sub).Error(); err != nil {
		return err
	}
	close(subscribed)
	for {
		ok, ttl, err := j.tryLock(ctx)
		if err != nil || ok {
			return err
		}
		if ttl <= 0 {
			ttl = time.Second
		}
		select {
		case <-msgs:
		case <-time.After(ttl):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
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

// Go Clients with the default RedissonPubSubAuto wake Java waiters and are
// woken by Java, on standalone (classic) and on Cluster (sharded pub/sub:
// the Java waiter listens on sharded pub/sub alone).
func TestRedissonJavaSimWakeUp(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		rounds := soak(10, 200)
		name := "java-wake-" + e.name
		ctx := withTimeout(t, 5*time.Minute)
		j := newJavaRLock(t, e, name)
		rl := e.client(t).RedissonLock(name)

		var goWakes, javaWakes []time.Duration
		for i := range rounds {
			ok, _, err := j.tryLock(ctx)
			require.NoError(t, err)
			require.True(t, ok)
			got := make(chan time.Time, 1)
			go func() {
				// Unlocked before the next round's Java lock.
				l, err := rl.Lock(ctx)
				at := time.Now()
				if err == nil {
					l.Unlock(ctx)
				} else {
					t.Error(err)
				}
				got <- at
			}()
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
			done := make(chan time.Time, 1)
			go func() {
				if err := j.lock(ctx, subscribed); err != nil {
					t.Error(err)
				}
				done <- time.Now()
			}()
			<-subscribed
			sent := time.Now()
			require.NoError(t, l.Unlock(ctx))
			select {
			case at := <-done:
				javaWakes = append(javaWakes, at.Sub(sent))
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: the Java waiter was not woken", i)
			}
			r, err := j.unlock(ctx)
			require.NoError(t, err)
			n, _ := r.AsInt64()
			require.EqualValues(t, 1, n)
		}
		t.Logf("%s: Go waiter woken by a Java unlock: %s; Java waiter woken by a Go unlock: %s", e.name,
			wakeStats(goWakes), wakeStats(javaWakes))
		require.Less(t, percentile(goWakes, 50), 250*time.Millisecond, "woken by the message, not the presence pass")
		require.Less(t, slices.Max(javaWakes), 5*time.Second, "the Java waiter got the message, not its 30 s TTL")
	})
}

// A Java holder's hold and a Go holder's exclude each other, and either
// side's unlock is refused for a lock the other holds.
func TestRedissonJavaSimExclusion(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		name := "java-excl-" + e.name
		ctx := withTimeout(t, time.Minute)
		j := newJavaRLock(t, e, name)
		rl := e.client(t).RedissonLock(name)
		ok, _, err := j.tryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		_, err = rl.TryLock(ctx)
		require.ErrorIs(t, err, ErrLocked)
		st, err := rl.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, []RedissonHolder{{Owner: j.field, Holds: 1}}, st.Holders)
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
