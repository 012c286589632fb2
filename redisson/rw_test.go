package redisson

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync"
)

// The Java side of Redisson's read-write lock in the simulator: the
// commands Redisson sends for an RReadWriteLock's read and write locks,
// written here from their documented layout (hash NAME with mode, reader
// fields UUID:THREADID, writer field UUID:THREADID:write, read hold keys
// {NAME}:UUID:THREADID:rwlock_timeout:N, channel redisson_rwlock:{NAME}).

const (
	// javaRWRead: KEYS name, hold key prefix; ARGV lease, field, write field.
	javaRWRead = `local m = redis.call('hget', KEYS[1], 'mode');
if m == false then redis.call('hset', KEYS[1], 'mode', 'read', ARGV[2], 1); redis.call('set', KEYS[2] .. ':1', 1, 'px', ARGV[1]); redis.call('pexpire', KEYS[1], ARGV[1]); return nil end;
if m == 'read' or (m == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then local n = redis.call('hincrby', KEYS[1], ARGV[2], 1);
redis.call('set', KEYS[2] .. ':' .. n, 1, 'px', ARGV[1]); redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1]))); return nil end;
return redis.call('pttl', KEYS[1]);`
	// javaRWReadUnlock: KEYS name, channel, hold key prefix, {name}, latch;
	// ARGV message 0, field, publish command.
	javaRWReadUnlock = `local v = redis.call('get', KEYS[5]); if v ~= false then return tonumber(v) end;
local m = redis.call('hget', KEYS[1], 'mode'); if m == false then redis.call(ARGV[3], KEYS[2], ARGV[1]); return nil end;
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end;
local c = redis.call('hincrby', KEYS[1], ARGV[2], -1); if c == 0 then redis.call('hdel', KEYS[1], ARGV[2]) end; redis.call('del', KEYS[3] .. ':' .. (c + 1));
if redis.call('hlen', KEYS[1]) > 1 then local mx = -3;
for _, f in ipairs(redis.call('hkeys', KEYS[1])) do local n = tonumber(redis.call('hget', KEYS[1], f));
if n then for i = n, 1, -1 do mx = math.max(mx, redis.call('pttl', KEYS[4] .. ':' .. f .. ':rwlock_timeout:' .. i)) end end end;
if mx > 0 then redis.call('pexpire', KEYS[1], mx); redis.call('set', KEYS[5], 0, 'px', 20000); return 0 end;
if m == 'write' then redis.call('set', KEYS[5], 0, 'px', 20000); return 0 end end;
redis.call('del', KEYS[1]); redis.call(ARGV[3], KEYS[2], ARGV[1]); redis.call('set', KEYS[5], 1, 'px', 20000); return 1;`
	// javaRWWrite: KEYS name; ARGV lease, write field.
	javaRWWrite = `local m = redis.call('hget', KEYS[1], 'mode');
if m == false then redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil end;
if m == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then redis.call('hincrby', KEYS[1], ARGV[2], 1);
redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + ARGV[1]); return nil end;
return redis.call('pttl', KEYS[1]);`
	// javaRWWriteUnlock: KEYS name, channel, latch; ARGV message 1, lease,
	// write field, publish command.
	javaRWWriteUnlock = `local v = redis.call('get', KEYS[3]); if v ~= false then return tonumber(v) end;
local m = redis.call('hget', KEYS[1], 'mode'); if m == false then redis.call(ARGV[4], KEYS[2], ARGV[1]); return nil end;
if m ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end;
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then redis.call('pexpire', KEYS[1], ARGV[2]); redis.call('set', KEYS[3], 0, 'px', 20000); return 0 end;
redis.call('hdel', KEYS[1], ARGV[3]);
if redis.call('hlen', KEYS[1]) == 1 then redis.call('del', KEYS[1]); redis.call(ARGV[4], KEYS[2], ARGV[1]) else redis.call('hset', KEYS[1], 'mode', 'read') end;
redis.call('set', KEYS[3], 1, 'px', 20000); return 1;`
	// javaRWForce: forceUnlock of the lock's mode. ARGV mode, message,
	// publish command.
	javaRWForce = `if redis.call('hget', KEYS[1], 'mode') == ARGV[1] then redis.call('del', KEYS[1]); redis.call(ARGV[3], KEYS[2], ARGV[2]); return 1 end; return 0;`
)

// javaRW is one Java thread's RReadWriteLock.
type javaRW struct {
	*javaSide
	name  string
	field string
	lease time.Duration
}

func newJavaRW(t testing.TB, e *env, name string) *javaRW {
	return &javaRW{javaSide: newJavaSide(t, e), name: name, field: uuid.NewString() + ":1", lease: 30 * time.Second}
}

func (j *javaRW) channel() string { return "redisson_rwlock:{" + j.name + "}" }
func (j *javaRW) holdKey(n int) string {
	return "{" + j.name + "}:" + j.field + ":rwlock_timeout:" + strconv.Itoa(n)
}

// try makes one read or write attempt: taken, or the lock's PTTL.
func (j *javaRW) try(ctx context.Context, write bool) (bool, time.Duration, error) {
	var r rueidis.RedisResult
	if write {
		r = j.eval(ctx, javaRWWrite, []string{j.name}, ms(j.lease), j.field+":write")
	} else {
		r = j.eval(ctx, javaRWRead, []string{j.name, "{" + j.name + "}:" + j.field + ":rwlock_timeout"}, ms(j.lease), j.field, j.field+":write")
	}
	ttl, err := r.AsInt64()
	if rueidis.IsRedisNil(err) {
		return true, 0, nil
	}
	return false, time.Duration(ttl) * time.Millisecond, err
}

func (j *javaRW) mustTry(t testing.TB, ctx context.Context, write bool) {
	t.Helper()
	ok, _, err := j.try(ctx, write)
	require.NoError(t, err)
	require.True(t, ok)
}

// lock waits as Redisson does, subscribed to the lock's channel.
func (j *javaRW) lock(ctx context.Context, write bool, subscribed chan<- struct{}) error {
	return j.await(ctx, j.channel(), subscribed, func() (bool, error) {
		ok, _, err := j.try(ctx, write)
		return ok, err
	})
}

// unlock sends Redisson's read or write unlock with a fresh request id:
// 1 freed, 0 still held, nil not held.
func (j *javaRW) unlock(ctx context.Context, write bool) (rueidis.RedisResult, error) {
	latch := "redisson_unlock_latch:{" + j.name + "}:" + redissonRequestID()
	var r rueidis.RedisResult
	if write {
		r = j.eval(ctx, javaRWWriteUnlock, []string{j.name, j.channel(), latch}, "1", ms(j.lease), j.field+":write", j.pub)
	} else {
		r = j.eval(ctx, javaRWReadUnlock, []string{j.name, j.channel(), "{" + j.name + "}:" + j.field + ":rwlock_timeout", "{" + j.name + "}", latch}, "0", j.field, j.pub)
	}
	if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
		return r, err
	}
	return r, j.rc.Do(ctx, j.rc.B().Del().Key(latch).Build()).Error()
}

func (j *javaRW) mustUnlock(t testing.TB, ctx context.Context, write bool, want int64) {
	t.Helper()
	r, err := j.unlock(ctx, write)
	require.NoError(t, err)
	n, err := r.AsInt64()
	require.NoError(t, err)
	require.Equal(t, want, n)
}

// Java and Go readers share the lock and keep writers of either side out;
// a Java writer keeps Go readers and writers out; the layout Go writes is
// the one Java reads.
func TestRedissonRWJavaSimShare(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		name := "rw-share-" + e.Name
		j := newJavaRW(t, e, name)
		rw := e.client(t).ReadWriteLock(name)

		j.mustTry(t, ctx, false)
		r1 := mustLock(t, ctx, rw.TryRLock)
		r2 := mustLock(t, ctx, e.client(t).ReadWriteLock(name).TryRLock)
		_, err := rw.TryLock(ctx)
		require.ErrorIs(t, err, redisync.ErrLocked)
		ok, ttl, err := j.try(ctx, true)
		require.NoError(t, err)
		require.False(t, ok, "Java's writer waits for the readers")
		require.Greater(t, ttl, 20*time.Second)
		st, err := rw.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, "read", st.Mode)
		require.Len(t, st.Readers, 3)
		require.Zero(t, st.Writer.Holds)
		// A Go read hold has Redisson's hold key, with the lease.
		pttl, err := j.rc.Do(ctx, j.rc.B().Pttl().Key("{"+name+"}:"+ownerOf(r1)+":rwlock_timeout:1").Build()).AsInt64()
		require.NoError(t, err)
		require.Greater(t, pttl, int64(20000))

		j.mustUnlock(t, ctx, false, 0)
		require.NoError(t, r1.Unlock(ctx))
		require.NoError(t, r2.Unlock(ctx))
		require.Empty(t, e.Keys(t, "*"+name+"*"), "the last reader deleted the hash; no hold key left")

		// A Java writer keeps both sides of Go out; Java re-enters it and
		// reads under it, as Redisson allows its writer.
		j.mustTry(t, ctx, true)
		j.mustTry(t, ctx, true)
		j.mustTry(t, ctx, false)
		_, err = rw.TryRLock(ctx)
		require.ErrorIs(t, err, redisync.ErrLocked)
		_, err = rw.TryLock(ctx)
		require.ErrorIs(t, err, redisync.ErrLocked)
		st, err = rw.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, "write", st.Mode)
		require.Equal(t, Holder{Owner: j.field + ":write", Holds: 2}, st.Writer)
		require.Equal(t, j.field[:36], st.Writer.ClientID())
		j.mustUnlock(t, ctx, true, 0)
		j.mustUnlock(t, ctx, true, 1)
		// The writer's read hold is left: mode read, Go readers come in.
		r1 = mustLock(t, ctx, rw.TryRLock)
		j.mustUnlock(t, ctx, false, 0)
		require.NoError(t, r1.Unlock(ctx))
		require.Empty(t, e.Keys(t, "*"+name+"*"))
	})
}

// Go's re-entry rules are Redisson's: a writer re-enters and reads, a
// reader re-enters, a reader's upgrade is refused; Java sees the fields
// they make.
func TestRedissonRWReentry(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		name := "rw-reentry-" + e.Name
		j := newJavaRW(t, e, name)
		c := e.client(t)
		rw := c.ReadWriteLock(name)

		w := mustLock(t, ctx, rw.Lock)
		w2 := mustLock(t, w.Context(), rw.Lock)
		rd := mustLock(t, w.Context(), rw.RLock)
		rd2 := mustLock(t, w.Context(), rw.RLock) // the writer's reads share one holder
		rd3 := mustLock(t, rd.Context(), rw.RLock)
		w3 := mustLock(t, rd.Context(), rw.TryLock) // a writer that reads may re-enter its write lock
		st, err := rw.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, "write", st.Mode)
		require.Equal(t, 3, st.Writer.Holds)
		require.Equal(t, c.ID(), st.Writer.ClientID())
		require.Equal(t, []Holder{{Owner: ownerOf(rd), Holds: 3}}, st.Readers)
		require.Equal(t, ownerOf(w), ownerOf(rd)+":write")
		require.Equal(t, ownerOf(rd), ownerOf(rd2), "the writer's reads share one ownership")
		ok, _, err := j.try(ctx, false)
		require.NoError(t, err)
		require.False(t, ok, "Java's reader waits for the writer")

		// The writer leaves, its reads stay: mode read, Java reads too.
		for _, l := range []*redisync.Lease{w3, w2, w} {
			require.NoError(t, l.Unlock(ctx))
		}
		st, err = rw.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, "read", st.Mode)
		require.Zero(t, st.Writer.Holds)
		j.mustTry(t, ctx, false)
		j.mustUnlock(t, ctx, false, 0)
		for _, l := range []*redisync.Lease{rd3, rd2, rd} {
			require.NoError(t, l.Unlock(ctx))
		}
		require.Empty(t, e.Keys(t, "*"+name+"*"))

		// A plain reader re-enters; its upgrade is refused at once.
		r := mustLock(t, ctx, rw.RLock)
		r2 := mustLock(t, r.Context(), rw.RLock)
		_, err = rw.Lock(r.Context())
		require.ErrorIs(t, err, redisync.ErrUpgrade)
		gl := delivered(t, rw.Acquire(r2.Context()))
		require.ErrorIs(t, gl.Err(), redisync.ErrUpgrade)
		require.NoError(t, r2.Unlock(ctx))
		require.NoError(t, r.Unlock(ctx))
		j.mustTry(t, ctx, true)
		j.mustUnlock(t, ctx, true, 1)
	})
}

// Go and Java readers and writers on two Clients: writers never overlap
// with anybody, readers overlap with each other.
func TestRedissonRWJavaSimExclusion(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const rounds = 8
		name := "rw-excl-" + e.Name
		ctx := withTimeout(t, time.Minute)
		locks := onClients(t, e, 2, func(c *Client) *ReadWriteLock { return c.ReadWriteLock(name) })
		var (
			mu                      sync.Mutex
			readers, writers        int
			overlap, count, readsIn int
			sharedReads             bool
			wg                      sync.WaitGroup
		)
		critical := func(write bool) {
			mu.Lock()
			if write {
				writers++
				if writers > 1 || readers > 0 {
					overlap++
				}
			} else {
				readers++
				readsIn++
				if writers > 0 {
					overlap++
				}
				sharedReads = sharedReads || readers > 1
			}
			n := count
			mu.Unlock()
			time.Sleep(200 * time.Microsecond)
			mu.Lock()
			if write {
				count = n + 1
				writers--
			} else {
				readers--
			}
			mu.Unlock()
		}
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				write := i%2 == 0
				for range rounds {
					lock := locks[i%2].RLock
					if write {
						lock = locks[i/2].Lock
					}
					l, err := lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					critical(write)
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		for i := range 2 {
			j := newJavaRW(t, e, name)
			write := i == 0
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					if err := j.lock(ctx, write, nil); err != nil {
						t.Error(err)
						return
					}
					critical(write)
					if r, err := j.unlock(ctx, write); err != nil || r.Error() != nil {
						t.Error(err, r.Error())
						return
					}
				}
			}()
		}
		wg.Wait()
		t.Logf("%s: %d writes (2 Go goroutines on 2 Clients, 1 Java thread) and %d reads (2 Go, 1 Java); %d overlaps; readers shared: %v",
			e.Name, count, readsIn, overlap, sharedReads)
		require.Zero(t, overlap)
		require.Equal(t, 3*rounds, count, "no lost update")
		require.Empty(t, e.Keys(t, "*"+name+"*"))
	})
}

// Wake-ups both ways: a Java writer's unlock wakes a Go reader and a Java
// reader's wakes a Go writer; a Go writer's unlock wakes a Java reader.
func TestRedissonRWJavaSimWakeUp(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		rounds := soak(8, 200)
		name := "rw-wake-" + e.Name
		ctx := withTimeout(t, 5*time.Minute)
		j := newJavaRW(t, e, name)
		rw := e.client(t).ReadWriteLock(name)
		var goWakes, javaWakes []time.Duration
		for i := range 2 * rounds {
			// Java holds the side that blocks the Go waiter's.
			javaWrite := i%2 == 0
			j.mustTry(t, ctx, javaWrite)
			lock := rw.Lock
			if javaWrite {
				lock = rw.RLock
			}
			got := lockedAt(t, ctx, lock)
			awaitGoWaiting(t, rw.c, j.channel())
			sent := time.Now()
			j.mustUnlock(t, ctx, javaWrite, 1)
			goWakes = append(goWakes, (<-got).Sub(sent))
			require.Zero(t, redissonWaiters(rw.c, j.channel()), "the Go waiter left its subscription")
		}
		for i := range rounds {
			w := mustLock(t, ctx, rw.Lock)
			subscribed := make(chan struct{})
			done := make(chan time.Time, 1)
			go func() {
				if err := j.lock(ctx, false, subscribed); err != nil {
					t.Error(err)
				}
				done <- time.Now()
			}()
			<-subscribed
			sent := time.Now()
			require.NoError(t, w.Unlock(ctx))
			select {
			case at := <-done:
				javaWakes = append(javaWakes, at.Sub(sent))
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: the Java reader was not woken", i)
			}
			j.mustUnlock(t, ctx, false, 1)
		}
		t.Logf("%s: Go waiter woken by a Java unlock: %s; Java reader woken by a Go writer's unlock: %s", e.Name,
			wakeStats(goWakes), wakeStats(javaWakes))
		require.Less(t, percentile(goWakes, 50), 250*time.Millisecond, "woken by the message, not the presence pass")
		require.Less(t, percentile(javaWakes, 50), 250*time.Millisecond, "woken by the message, not its poll")
	})
}

// The watchdog renews Go readers and writers as Java sees them (the hash
// and every read hold key), and a forced unlock or a delete from Java is a
// loss to the Go holders.
func TestRedissonRWWatchdogAndLoss(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		name := "rw-watchdog-" + e.Name
		j := newJavaRW(t, e, name)
		rw := e.client(t, redisync.WithWatchdogLease(600*time.Millisecond)).ReadWriteLock(name)

		r := mustLock(t, ctx, rw.RLock)
		r2 := mustLock(t, r.Context(), rw.RLock)
		time.Sleep(1500 * time.Millisecond)
		require.NoError(t, r.Err())
		ok, ttl, err := j.try(ctx, true)
		require.NoError(t, err)
		require.False(t, ok, "the renewed readers keep Java's writer out")
		require.Positive(t, ttl)
		for n := 1; n <= 2; n++ {
			pttl, err := j.rc.Do(ctx, j.rc.B().Pttl().Key("{"+name+"}:"+ownerOf(r)+":rwlock_timeout:"+strconv.Itoa(n)).Build()).AsInt64()
			require.NoError(t, err)
			require.Positive(t, pttl, "read hold key %d renewed", n)
		}
		// Java's forced unlock of the read lock: both Go read leases lose it.
		found, err := j.eval(ctx, javaRWForce, []string{name, j.channel()}, "read", "0", j.pub).AsInt64()
		require.NoError(t, err)
		require.EqualValues(t, 1, found)
		for _, l := range []*redisync.Lease{r, r2} {
			select {
			case <-l.Lost():
			case <-time.After(5 * time.Second):
				t.Fatal("the Go reader did not see the lock force-unlocked")
			}
			require.ErrorIs(t, l.Err(), redisync.ErrExpired)
		}
		require.ErrorIs(t, r2.Unlock(ctx), redisync.ErrNotHeld)

		w := mustLock(t, ctx, rw.Lock)
		time.Sleep(1500 * time.Millisecond)
		require.NoError(t, w.Err())
		ok, _, err = j.try(ctx, false)
		require.NoError(t, err)
		require.False(t, ok, "the renewed writer keeps Java's reader out")
		// RReadWriteLock.delete(): the hash goes.
		require.NoError(t, j.rc.Do(ctx, j.rc.B().Del().Key(name).Build()).Error())
		select {
		case <-w.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("the Go writer did not see the lock deleted")
		}
		require.ErrorIs(t, w.Err(), redisync.ErrExpired)

		// Go's forced unlock of a Java writer, seen by Java's unlock.
		j.mustTry(t, ctx, true)
		found2, err := rw.ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, found2)
		r3, err := j.unlock(ctx, true)
		require.NoError(t, err)
		require.True(t, rueidis.IsRedisNil(r3.Error()), "Java's unlock of a lock it lost is refused")
		found2, err = rw.ForceUnlock(ctx)
		require.NoError(t, err)
		require.False(t, found2)
	})
}

// A name of another type or layout is never taken, and left alone.
func TestRedissonRWWrongLayout(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		rc := e.RueidisClient(t)
		str, rlock, fair := "rw-string-"+e.Name, "rw-rlock-"+e.Name, "rw-fair-"+e.Name
		require.NoError(t, rc.Do(ctx, rc.B().Set().Key(str).Value("5").Build()).Error())
		require.NoError(t, rc.Do(ctx, rc.B().Hset().Key(rlock).FieldValue().FieldValue("x:1", "1").Build()).Error())
		require.NoError(t, rc.Do(ctx, rc.B().Rpush().Key("redisson_lock_queue:{"+fair+"}").Element("x:1").Build()).Error())
		for _, name := range []string{str, rlock, fair} {
			rw := c.ReadWriteLock(name)
			_, err := rw.TryRLock(ctx)
			require.ErrorIs(t, err, redisync.ErrWrongType, name)
			_, err = rw.RLock(ctx)
			require.ErrorIs(t, err, redisync.ErrWrongType, name)
			_, err = rw.TryLock(ctx)
			require.ErrorIs(t, err, redisync.ErrWrongType, name)
			_, err = rw.Lock(ctx)
			require.ErrorIs(t, err, redisync.ErrWrongType, name)
			if name != fair {
				_, err = rw.ForceUnlock(ctx)
				require.ErrorIs(t, err, redisync.ErrWrongType, name)
				_, err = rw.Inspect(ctx)
				require.ErrorIs(t, err, redisync.ErrWrongType, name)
			}
		}
		v, err := rc.Do(ctx, rc.B().Get().Key(str).Build()).ToString()
		require.NoError(t, err)
		require.Equal(t, "5", v, "left alone")
		h, err := rc.Do(ctx, rc.B().Hgetall().Key(rlock).Build()).AsStrMap()
		require.NoError(t, err)
		require.Equal(t, map[string]string{"x:1": "1"}, h, "left alone")
		n, err := rc.Do(ctx, rc.B().Exists().Key(fair).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, n, "not taken")
		// And the RLock side refuses a read-write lock.
		l := mustLock(t, ctx, c.ReadWriteLock(str+"-rw").RLock)
		_, err = c.Lock(str + "-rw").TryLock(ctx)
		require.ErrorIs(t, err, redisync.ErrWrongType)
		require.NoError(t, l.Unlock(ctx))
		var nilRW *ReadWriteLock
		_, err = nilRW.TryRLock(ctx)
		require.ErrorIs(t, err, redisync.ErrInvalidArgument)
		_, err = c.ReadWriteLock("").Lock(ctx)
		require.ErrorIs(t, err, redisync.ErrInvalidArgument)
	})
}

// javaRWReadRenew is a Java reader's watchdog renewal: the hash gets the
// reader's lease (whatever it had), and its read hold keys too. KEYS name,
// hold key prefix; ARGV lease, field.
const javaRWReadRenew = `local n = tonumber(redis.call('hget', KEYS[1], ARGV[2])); if n == nil then return 0 end;
redis.call('pexpire', KEYS[1], ARGV[1]); for i = n, 1, -1 do redis.call('pexpire', KEYS[2] .. ':' .. i, ARGV[1]) end; return 1;`

// renewRead runs the Java reader's watchdog renewal once.
func (j *javaRW) renewRead(ctx context.Context) error {
	return j.eval(ctx, javaRWReadRenew, []string{j.name, "{" + j.name + "}:" + j.field + ":rwlock_timeout"}, ms(j.lease), j.field).Error()
}

// TestRedissonRWShorterJavaWatchdog: a Java reader's renewals set the
// shared read hash's expiry to its own lease (1.5 s), far shorter than a
// Go reader's. When the Java reader dies, the Go reader keeps the read
// lock and a Java writer waits: the Go reader renews at a third of the
// shortest expiry it has seen on the hash, read when it took its hold
// (the Java reader there first) or at a renewal (the Java reader joined
// later), whatever its own lease (the default watchdog lease, or
// WithRenewedLease).
func TestRedissonRWShorterJavaWatchdog(t *testing.T) {
	const javaLease = 1500 * time.Millisecond
	cases := []struct {
		name string
		// javaFirst: the Java reader holds before the Go reader comes.
		javaFirst bool
		javaLease time.Duration
		// javaFor is how long the Java reader renews before it dies.
		javaFor time.Duration
		client  []redisync.Option
		opts    []Option
	}{
		{name: "default-lease", javaFirst: true, javaLease: javaLease, javaFor: 2500 * time.Millisecond},
		{name: "renewed-lease", javaFirst: true, javaLease: javaLease, javaFor: 2500 * time.Millisecond, opts: []Option{WithRenewedLease(javaLease)}},
		// The Go reader renews first a third of its 6 s lease in (2 s),
		// when it finds the expiry the Java reader's renewals set; the
		// Java reader dies a second later, and its expiry would end the
		// hash before the Go reader's next renewal on its own lease (4 s).
		{name: "java-joins", javaLease: 600 * time.Millisecond, javaFor: 3 * time.Second, client: []redisync.Option{redisync.WithWatchdogLease(6 * time.Second)}},
	}
	eachEnv(t, func(t *testing.T, e *env) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ctx := withTimeout(t, time.Minute)
				name := "rw-short-java-" + tc.name + "-" + e.Name
				reader, writer := newJavaRW(t, e, name), newJavaRW(t, e, name)
				reader.lease = tc.javaLease
				rw := e.client(t, tc.client...).ReadWriteLock(name, tc.opts...)
				var r *redisync.Lease
				if tc.javaFirst {
					reader.mustTry(t, ctx, false)
					r = mustLock(t, ctx, rw.RLock)
				} else {
					r = mustLock(t, ctx, rw.RLock)
					reader.mustTry(t, ctx, false)
				}
				// The Java reader's watchdog, a third of its lease apart,
				// then it dies.
				for start := time.Now(); time.Since(start) < tc.javaFor; {
					require.NoError(t, reader.renewRead(ctx))
					time.Sleep(tc.javaLease / 3)
				}
				require.NoError(t, reader.renewRead(ctx))
				died := time.Now()
				for time.Since(died) < 3*tc.javaLease {
					ok, _, err := writer.try(ctx, true)
					require.NoError(t, err)
					require.False(t, ok, "the Java writer got in %v after the Java reader died", time.Since(died).Round(time.Millisecond))
					require.NoError(t, r.Err(), "the Go reader keeps its lock")
					time.Sleep(100 * time.Millisecond)
				}
				require.NoError(t, r.Unlock(ctx))
			})
		}
	})
}
