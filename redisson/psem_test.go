package redisson

import (
	"context"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/internal/testenv"
)

// psemLock is a form of acquisition of n permits of s, for mustLock.
func psemLock(s *PermitExpirableSemaphore, n int) func(context.Context) (*redisync.Lease, error) {
	return func(ctx context.Context) (*redisync.Lease, error) { return s.Lock(ctx, n) }
}

// psemLost waits for l to be reported lost, at most within.
func psemLost(t testing.TB, l *redisync.Lease, within time.Duration, what string) {
	t.Helper()
	select {
	case <-l.Lost():
	case <-time.After(within):
		t.Fatalf("%s: the redisync.Lease was not reported lost within %v", what, within)
	}
}

// Go and Java-side holders share the permits: each side is woken by the
// other's release, and never more permits are held than there are.
func TestRedissonPermitExpirableSemaphoreJavaSim(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const rounds = 10
		name := "rpsem-" + e.Name
		ctx := withTimeout(t, 2*time.Minute)
		j := newJavaPSem(t, e, name)
		sems := onClients(t, e, 2, func(c *Client) *PermitExpirableSemaphore {
			return c.PermitExpirableSemaphore(name)
		})
		ok, err := sems[0].TrySetPermits(ctx, 1)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = sems[1].TrySetPermits(ctx, 5)
		require.NoError(t, err)
		require.False(t, ok, "already set")

		// Wake-ups both ways, with the one permit. The Java holder's
		// permit has no lease, so only its release can wake the Go
		// waiter; the Go holder's permit has the watchdog's 30 s.
		var goWakes, javaWakes []time.Duration
		for i := range rounds {
			ids, _, err := j.tryAcquire(ctx, 1, -1)
			require.NoError(t, err)
			require.Len(t, ids, 1)
			waiting := sems[i%2].Acquire(ctx, 1)
			awaitSubscribers(t, e, j.keys()[2], 1)
			sent := time.Now()
			released, err := j.release(ctx, ids[0])
			require.NoError(t, err)
			require.True(t, released)
			l := recv(t, waiting, 10*time.Second, "the Go waiter after a Java release")
			goWakes = append(goWakes, time.Since(sent))
			goIDs := sems[i%2].PermitIDs(l)
			require.Len(t, goIDs, 1)

			subscribed := make(chan struct{})
			done := make(chan time.Time, 1)
			var javaIDs []string
			go func() {
				var err error
				if javaIDs, err = j.acquire(ctx, 1, -1, subscribed); err != nil {
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
			require.Len(t, javaIDs, 1)
			released, err = j.release(ctx, javaIDs[0])
			require.NoError(t, err)
			require.True(t, released)
			released, err = j.release(ctx, goIDs[0])
			require.NoError(t, err)
			require.False(t, released, "Java's release of a permit the Go redisync.Lease gave back")
		}
		t.Logf("%s: Go waiter woken by a Java release: p50 %v, max %v; Java waiter woken by a Go Unlock: p50 %v, max %v", e.Name,
			percentile(goWakes, 50), slices.Max(goWakes), percentile(javaWakes, 50), slices.Max(javaWakes))
		require.Less(t, percentile(goWakes, 50), 250*time.Millisecond, "woken by the message, not the poll")
		require.Less(t, percentile(javaWakes, 50), 250*time.Millisecond, "woken by the message, not the lease's end")

		// Two permits among Go holders of one or two permits and Java
		// holders of one: never more than two held at once, and every
		// permit comes back.
		_, err = sems[0].AddPermits(ctx, 1)
		require.NoError(t, err)
		var (
			mu                  sync.Mutex
			inside, most, count int
			wg                  sync.WaitGroup
		)
		critical := func(n int) {
			mu.Lock()
			inside += n
			most = max(most, inside)
			mu.Unlock()
			time.Sleep(200 * time.Microsecond)
			mu.Lock()
			inside -= n
			count++
			mu.Unlock()
		}
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := 1 + i%2
				for range rounds {
					l, err := sems[i%2].Lock(ctx, n)
					if err != nil {
						t.Error(err)
						return
					}
					critical(n)
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		for range 2 {
			j := newJavaPSem(t, e, name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					ids, err := j.acquire(ctx, 1, 30*time.Second, nil)
					if err != nil {
						t.Error(err)
						return
					}
					critical(1)
					if ok, err := j.release(ctx, ids[0]); err != nil || !ok {
						t.Errorf("Java release: %v, %v", ok, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		t.Logf("%s: %d passes by 4 Go goroutines and 2 Java threads through 2 permits; at most %d held at once", e.Name, count, most)
		require.LessOrEqual(t, most, 2, "never more permits held than there are")
		require.Equal(t, 6*rounds, count)
		n, err := sems[0].AvailablePermits(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "every permit came back")
		n, err = sems[1].AcquiredPermits(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

// Permits whose lease ran out are reclaimed and go to a waiter, on either
// side, when the lease ends rather than at the next poll; a Go redisync.Lease
// learns that its permits were released or deleted by somebody else.
func TestRedissonPermitExpirableSemaphoreExpiry(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		name := "rpsem-exp-" + e.Name
		ctx := withTimeout(t, 2*time.Minute)
		j := newJavaPSem(t, e, name)
		c := e.client(t, redisync.WithWatchdogLease(600*time.Millisecond))
		s := c.PermitExpirableSemaphore(name)
		ok, err := s.TrySetPermits(ctx, 1)
		require.NoError(t, err)
		require.True(t, ok)

		// A Java holder that dies: its permit's lease ends, the Go waiter
		// gets it then, not before, and well before its 1 s poll.
		const javaLease = 200 * time.Millisecond
		ids, _, err := j.tryAcquire(ctx, 1, javaLease)
		require.NoError(t, err)
		require.Len(t, ids, 1)
		taken := time.Now()
		_, err = s.TryLock(ctx, 1)
		require.ErrorIs(t, err, redisync.ErrNoPermits)
		l := mustLock(t, ctx, psemLock(s, 1))
		waited := time.Since(taken)
		t.Logf("%s: the Go waiter got the permit of a Java holder with a lease of %v after %v", e.Name, javaLease, waited)
		require.GreaterOrEqual(t, waited, javaLease-50*time.Millisecond, "not before the Java permit expired")
		require.Less(t, waited, 900*time.Millisecond, "woken at the permit's expiry, not by the poll")
		released, err := j.release(ctx, ids[0])
		require.NoError(t, err)
		require.False(t, released, "the expired Java permit was reclaimed")

		// The watchdog keeps a Go permit past its lease; Java waits.
		goID := s.PermitIDs(l)[0]
		time.Sleep(time.Second)
		require.NoError(t, l.Err())
		left, err := s.LeaseTime(ctx, goID)
		require.NoError(t, err)
		require.Greater(t, left, time.Duration(0))
		require.LessOrEqual(t, left, 600*time.Millisecond)
		got, _, err := j.tryAcquire(ctx, 1, time.Minute)
		require.NoError(t, err)
		require.Nil(t, got, "the renewed Go permit is held")

		// Java releases the Go permit by id: the redisync.Lease is lost.
		released, err = j.release(ctx, goID)
		require.NoError(t, err)
		require.True(t, released)
		psemLost(t, l, 5*time.Second, "released by Java")
		require.ErrorIs(t, l.Err(), redisync.ErrExpired)
		require.ErrorIs(t, l.Unlock(ctx), redisync.ErrNotHeld)
		n, err := s.AvailablePermits(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "the Unlock of the lost redisync.Lease gave nothing back twice")

		// A fixed lease runs out: the redisync.Lease reports it, and a Java waiter
		// gets the permit once it expired.
		fixed := c.PermitExpirableSemaphore(name, WithLeaseTime(400*time.Millisecond))
		l = mustLock(t, ctx, psemLock(fixed, 1))
		subscribed := make(chan struct{})
		javaGot := make(chan []string, 1)
		go func() {
			ids, err := j.acquire(ctx, 1, time.Minute, subscribed)
			if err != nil {
				t.Error(err)
			}
			javaGot <- ids
		}()
		<-subscribed
		psemLost(t, l, 5*time.Second, "a fixed lease")
		require.ErrorIs(t, l.Err(), redisync.ErrExpired)
		select {
		case ids = <-javaGot:
		case <-time.After(5 * time.Second):
			t.Fatal("the Java waiter did not get the expired Go permit")
		}
		require.Len(t, ids, 1)
		require.ErrorIs(t, l.Unlock(ctx), redisync.ErrNotHeld)
		released, err = j.release(ctx, ids[0])
		require.NoError(t, err)
		require.True(t, released)

		// Extend is Java's updateLeaseTime for a fixed lease.
		l = mustLock(t, ctx, psemLock(fixed, 1))
		require.NoError(t, l.Extend(ctx, 5*time.Second))
		left, err = fixed.LeaseTime(ctx, fixed.PermitIDs(l)[0])
		require.NoError(t, err)
		require.Greater(t, left, 4*time.Second)
		time.Sleep(500 * time.Millisecond)
		require.NoError(t, l.Err(), "extended past its first lease")

		// Deleted with the semaphore: lost, and nothing comes back.
		rc := e.RueidisClient(t)
		require.NoError(t, rc.Do(ctx, rc.B().Del().Key(j.keys()[0], j.keys()[1]).Build()).Error())
		psemLost(t, l, 5*time.Second, "deleted")
		require.ErrorIs(t, l.Err(), redisync.ErrExpired)
		require.ErrorIs(t, l.Unlock(ctx), redisync.ErrNotHeld)
		require.Empty(t, e.Keys(t, "*"+name+"*"), "nothing brought back")
	})
}

// The layout as Java reads it: ids of 16 bytes shown as 32 hex digits,
// scores in ms, Java's no-lease score, and the calls by id.
func TestRedissonPermitExpirableSemaphoreLayout(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		name := "rpsem-layout-" + e.Name
		ctx := withTimeout(t, time.Minute)
		j := newJavaPSem(t, e, name)
		rc := e.RueidisClient(t)
		c := e.client(t, redisync.WithWatchdogLease(3*time.Second))
		s := c.PermitExpirableSemaphore(name)
		_, err := s.TryLock(ctx, 1)
		require.ErrorIs(t, err, redisync.ErrNoPermits, "a semaphore never set has no permits")
		n, err := s.SetPermits(ctx, 4)
		require.NoError(t, err)
		require.EqualValues(t, 4, n)

		l := mustLock(t, ctx, psemLock(s, 2))
		ids := s.PermitIDs(l)
		require.Len(t, ids, 2)
		for _, id := range ids {
			require.Regexp(t, `^[0-9a-f]{32}$`, id)
		}
		require.Nil(t, c.PermitExpirableSemaphore("other").PermitIDs(l))
		members, err := rc.Do(ctx, rc.B().Zrange().Key(j.keys()[1]).Min("0").Max("-1").Withscores().Build()).AsZScores()
		require.NoError(t, err)
		require.Len(t, members, 2)
		var raw []string
		for _, m := range members {
			require.Len(t, m.Member, 16, "the member is the id's 16 bytes")
			raw = append(raw, hex.EncodeToString([]byte(m.Member)))
			left := time.Duration(int64(m.Score)-time.Now().UnixMilli()) * time.Millisecond
			require.InDelta(t, float64(3*time.Second), float64(left), float64(time.Second), "the score is the expiry in ms")
		}
		require.ElementsMatch(t, ids, raw)

		// A Java permit without lease, and one with.
		forever, _, err := j.tryAcquire(ctx, 1, -1)
		require.NoError(t, err)
		require.Len(t, forever, 1)
		leased, _, err := j.tryAcquire(ctx, 1, time.Hour)
		require.NoError(t, err)
		require.Len(t, leased, 1)
		d, err := s.LeaseTime(ctx, forever[0])
		require.NoError(t, err)
		require.Equal(t, NoLease, d)
		d, err = s.LeaseTime(ctx, leased[0])
		require.NoError(t, err)
		require.InDelta(t, float64(time.Hour), float64(d), float64(time.Minute))
		_, err = s.TryLock(ctx, 1)
		require.ErrorIs(t, err, redisync.ErrNoPermits)

		st, err := s.Inspect(ctx)
		require.NoError(t, err)
		require.True(t, st.Exists)
		require.Zero(t, st.Available)
		require.Len(t, st.Permits, 4)
		require.Equal(t, NoLease, st.Permits[3].Lease, "the permit without lease comes last")
		require.Equal(t, forever[0], st.Permits[3].ID)
		for _, p := range st.Permits {
			require.False(t, p.Expired)
		}
		n, err = s.Permits(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 4, n, "none available, 4 acquired")
		n, err = s.AcquiredPermits(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 4, n)
		n, err = s.AvailablePermits(ctx)
		require.NoError(t, err)
		require.Zero(t, n)

		// redisync.Lease changes by id: Java's permit gets a lease, then loses it.
		ok, err := s.UpdateLeaseTime(ctx, forever[0], time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		d, err = s.LeaseTime(ctx, forever[0])
		require.NoError(t, err)
		require.InDelta(t, float64(time.Minute), float64(d), float64(5*time.Second))
		ok, err = s.UpdateLeaseTime(ctx, forever[0], NoLease)
		require.NoError(t, err)
		require.True(t, ok)
		score, err := rc.Do(ctx, rc.B().Zscore().Key(j.keys()[1]).Member(string(mustHex(t, forever[0]))).Build()).ToString()
		require.NoError(t, err)
		require.Equal(t, javaNoLease, score, "Java's no-lease score")

		// Release by id: all or nothing; TryRelease those held.
		unknown := redissonRequestID()
		err = s.Release(ctx, leased[0], unknown)
		require.ErrorIs(t, err, redisync.ErrNotHeld)
		require.Contains(t, err.Error(), unknown)
		d, err = s.LeaseTime(ctx, leased[0])
		require.NoError(t, err, "not released")
		require.Greater(t, d, time.Duration(0))
		_, err = s.LeaseTime(ctx, unknown)
		require.ErrorIs(t, err, redisync.ErrNotHeld)
		ok, err = s.UpdateLeaseTime(ctx, unknown, time.Minute)
		require.NoError(t, err)
		require.False(t, ok)
		require.NoError(t, s.Release(ctx, leased[0]))
		got, err := s.TryRelease(ctx, forever[0], leased[0], unknown)
		require.NoError(t, err)
		require.Equal(t, 1, got)
		n, err = s.AvailablePermits(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 2, n)

		// Releasing a Go redisync.Lease's permit by id: Release in upper case, as
		// Java's decodeHexDump reads it.
		up := []byte(ids[0])
		for i, b := range up {
			if b >= 'a' && b <= 'f' {
				up[i] = b - 'a' + 'A'
			}
		}
		require.NoError(t, s.Release(ctx, string(up)))
		psemLost(t, l, 5*time.Second, "released by id")
		require.ErrorIs(t, l.Err(), redisync.ErrExpired)
		require.ErrorIs(t, l.Unlock(ctx), redisync.ErrNotHeld, "one permit of the two was released")
		n, err = s.Permits(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 4, n, "Unlock gave back the permit still held")
		n, err = s.AvailablePermits(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 4, n)

		// SetPermits counts what is acquired; AddPermits goes below zero.
		l = mustLock(t, ctx, psemLock(s, 3))
		n, err = s.SetPermits(ctx, 2)
		require.NoError(t, err)
		require.EqualValues(t, -1, n, "2 permits in all, 3 of them acquired")
		n, err = s.AddPermits(ctx, 2)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		n, err = s.AddPermits(ctx, -1)
		require.NoError(t, err)
		require.Zero(t, n)
		require.NoError(t, l.Unlock(ctx))
		n, err = s.Permits(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 3, n)

		// The semaphore's TTL is copied to the permits, as Redisson does.
		require.NoError(t, rc.Do(ctx, rc.B().Pexpire().Key(name).Milliseconds(60000).Build()).Error())
		l = mustLock(t, ctx, psemLock(s, 1))
		pttl, err := rc.Do(ctx, rc.B().Pttl().Key(j.keys()[1]).Build()).AsInt64()
		require.NoError(t, err)
		require.Greater(t, pttl, int64(50000))
		require.NoError(t, l.Unlock(ctx))

		// Close gives the permits back.
		c2 := e.client(t)
		mustLock(t, ctx, psemLock(c2.PermitExpirableSemaphore(name), 3))
		n, err = s.AvailablePermits(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		require.NoError(t, c2.Close())
		n, err = s.AvailablePermits(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
		n, err = s.AcquiredPermits(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		require.NoError(t, rc.Do(ctx, rc.B().Del().Key(name).Build()).Error())
	})
}

func mustHex(t testing.TB, id string) []byte {
	t.Helper()
	b, err := hex.DecodeString(id)
	require.NoError(t, err)
	return b
}

// A name holding something else is refused, nothing written; bad input is
// an error, never a panic.
func TestRedissonPermitExpirableSemaphoreWrongLayout(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		rc := e.RueidisClient(t)
		c := e.client(t)
		id := redissonRequestID()
		type plant struct{ key, what string }
		for i, p := range []func(name string) plant{
			func(name string) plant { return plant{name, "hash"} },
			func(name string) plant { return plant{name, "x"} },
			func(name string) plant { return plant{name, "1.5"} },
			func(name string) plant { return plant{"{" + name + "}:timeout", "string"} },
		} {
			name := "rpsem-bad-" + strconv.Itoa(i) + "-" + e.Name
			pl := p(name)
			if pl.what == "hash" {
				require.NoError(t, rc.Do(ctx, rc.B().Hset().Key(pl.key).FieldValue().FieldValue("a", "1").Build()).Error())
			} else {
				require.NoError(t, rc.Do(ctx, rc.B().Set().Key(pl.key).Value(pl.what).Build()).Error())
				if pl.key != name {
					require.NoError(t, rc.Do(ctx, rc.B().Set().Key(name).Value("5").Build()).Error())
				}
			}
			before := e.Keys(t, "*"+name+"*")
			s := c.PermitExpirableSemaphore(name)
			_, err := s.TryLock(ctx, 1)
			require.ErrorIs(t, err, redisync.ErrWrongType, "%v", pl)
			_, err = s.Lock(ctx, 1)
			require.ErrorIs(t, err, redisync.ErrWrongType)
			l := <-s.Acquire(ctx, 1)
			require.ErrorIs(t, l.Err(), redisync.ErrWrongType)
			_, err = s.AddPermits(ctx, 1)
			require.ErrorIs(t, err, redisync.ErrWrongType)
			_, err = s.TrySetPermits(ctx, 1)
			require.ErrorIs(t, err, redisync.ErrWrongType)
			_, err = s.SetPermits(ctx, 1)
			require.ErrorIs(t, err, redisync.ErrWrongType)
			_, err = s.AvailablePermits(ctx)
			require.ErrorIs(t, err, redisync.ErrWrongType)
			require.ErrorIs(t, s.Release(ctx, id), redisync.ErrWrongType)
			_, err = s.LeaseTime(ctx, id)
			require.ErrorIs(t, err, redisync.ErrWrongType)
			_, err = s.Inspect(ctx)
			require.ErrorIs(t, err, redisync.ErrWrongType)
			require.ElementsMatch(t, before, e.Keys(t, "*"+name+"*"), "nothing written")
			if pl.key == name && pl.what != "hash" {
				v, err := rc.Do(ctx, rc.B().Get().Key(name).Build()).ToString()
				require.NoError(t, err)
				require.Equal(t, pl.what, v)
			}
		}
		// A zset whose members are not 16-byte ids is not read as permits.
		zname := "rpsem-zset-" + e.Name
		require.NoError(t, rc.Do(ctx, rc.B().Zadd().Key("{"+zname+"}:timeout").ScoreMember().ScoreMember(1, "member").Build()).Error())
		_, err := InspectPermitExpirableSemaphore(ctx, rc, zname)
		require.ErrorIs(t, err, redisync.ErrWrongType)

		// Bad input.
		s := c.PermitExpirableSemaphore("rpsem-input-" + e.Name)
		for _, n := range []int{0, -1, redissonPermitsMax + 1, int(^uint(0) >> 1)} {
			_, err := s.TryLock(ctx, n)
			require.ErrorIs(t, err, redisync.ErrInvalidArgument, "%d permits", n)
			_, err = s.Lock(ctx, n)
			require.ErrorIs(t, err, redisync.ErrInvalidArgument)
			require.ErrorIs(t, (<-s.Acquire(ctx, n)).Err(), redisync.ErrInvalidArgument)
		}
		for _, ids := range [][]string{nil, {"xyz"}, {id[:30]}, {id + "00"}, {id, id}, {"zz" + id[2:]}} {
			require.ErrorIs(t, s.Release(ctx, ids...), redisync.ErrInvalidArgument, "%q", ids)
			_, err := s.TryRelease(ctx, ids...)
			require.ErrorIs(t, err, redisync.ErrInvalidArgument)
		}
		_, err = s.TrySetPermits(ctx, -1)
		require.ErrorIs(t, err, redisync.ErrInvalidArgument)
		_, err = s.SetPermits(ctx, -1)
		require.ErrorIs(t, err, redisync.ErrInvalidArgument)
		for _, d := range []time.Duration{0, -2, time.Microsecond} {
			_, err = s.UpdateLeaseTime(ctx, id, d)
			require.ErrorIs(t, err, redisync.ErrInvalidArgument, "%v", d)
		}
		_, err = s.LeaseTime(ctx, "nope")
		require.ErrorIs(t, err, redisync.ErrInvalidArgument)
		var nilSem *PermitExpirableSemaphore
		require.Empty(t, nilSem.Name())
		require.Nil(t, nilSem.PermitIDs(nil))
		_, err = nilSem.TryLock(ctx, 1)
		require.ErrorIs(t, err, redisync.ErrInvalidArgument)
		require.ErrorIs(t, nilSem.Release(ctx, id), redisync.ErrInvalidArgument)
		var nilCtx context.Context
		_, err = s.Lock(nilCtx, 1) //nolint:staticcheck // a nil context on purpose
		require.ErrorIs(t, err, redisync.ErrInvalidArgument)
		_, err = c.PermitExpirableSemaphore("").AvailablePermits(ctx)
		require.ErrorIs(t, err, redisync.ErrInvalidArgument)
		_, err = c.PermitExpirableSemaphore("x", WithLeaseTime(time.Microsecond)).TryLock(ctx, 1)
		require.ErrorIs(t, err, redisync.ErrInvalidArgument)
		if e.Cluster != nil {
			_, err = c.PermitExpirableSemaphore("a{b").AvailablePermits(ctx)
			require.ErrorIs(t, err, redisync.ErrInvalidArgument)
		}
		_, err = InspectPermitExpirableSemaphore(ctx, nil, "x")
		require.ErrorIs(t, err, redisync.ErrInvalidArgument)
		closed := e.client(t)
		require.NoError(t, closed.Close())
		_, err = closed.PermitExpirableSemaphore("x").TryLock(ctx, 1)
		require.ErrorIs(t, err, redisync.ErrClosed)
	})
}

// Acquisitions given up at every step, by Lock, TryLock and Acquire on
// three Clients: permits are never oversubscribed, and once they all
// ended every permit is back, with no subscription and no goroutine left.
func TestRedissonPermitExpirableSemaphoreCancellationsLeaveNothing(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		noLeak := leakCheck(t)
		const size = 3
		names := []string{"rpsemcancel-a-" + e.Name, "rpsemcancel-b-" + e.Name, "{rpsemcancel-c-" + e.Name + "}"}
		clients := e.clients(t, 3)
		ctx := context.Background()
		inside := make(map[string]*atomic.Int64)
		for _, name := range names {
			ok, err := clients[0].PermitExpirableSemaphore(name).TrySetPermits(ctx, size)
			require.NoError(t, err)
			require.True(t, ok)
			inside[name] = new(atomic.Int64)
		}
		total := soak(3000, 30000)
		var overs atomic.Int64
		acquired := testenv.Churn(t, total, 24, below(5*time.Millisecond), redisync.ErrNotHeld, func(ctx context.Context, w int) (*redisync.Lease, error) {
			name := names[rand.IntN(len(names))]
			s := clients[w%len(clients)].PermitExpirableSemaphore(name)
			n := 1 + rand.IntN(size)
			l, err := testenv.OneOf(
				func(ctx context.Context) (*redisync.Lease, error) { return s.Lock(ctx, n) },
				testenv.Waited(func(ctx context.Context) <-chan *redisync.Lease { return s.Acquire(ctx, n) }),
				func(ctx context.Context) (*redisync.Lease, error) { return s.TryLock(ctx, n) },
			)(ctx)
			if err != nil {
				if !errors.Is(err, redisync.ErrNoPermits) && ctx.Err() == nil && !transient(err) {
					t.Error(err)
				}
				return nil, err
			}
			if inside[name].Add(int64(n)) > size {
				overs.Add(1)
			}
			time.Sleep(rand.N(200 * time.Microsecond))
			inside[name].Add(-int64(n))
			return l, nil
		})
		t.Logf("%s: %d attempts, %d acquisitions", e.Name, total, acquired)
		require.NotZero(t, acquired)
		require.Zero(t, overs.Load(), "permits oversubscribed")
		for _, c := range clients {
			require.NoError(t, c.Close())
		}
		check := e.client(t)
		rc := e.RueidisClient(t)
		for _, name := range names {
			s := check.PermitExpirableSemaphore(name)
			st, err := s.Inspect(ctx)
			require.NoError(t, err)
			require.Equal(t, PermitExpirableSemaphoreState{Exists: true, Available: size, TTL: -time.Millisecond}, st, "semaphore %q", name)
			require.NoError(t, rc.Do(ctx, rc.B().Del().Key(name).Build()).Error())
		}
		require.NoError(t, check.Close())
		for _, name := range names {
			require.Empty(t, e.Keys(t, "*"+name+"*"), "keys left")
		}
		e.RequireNoSubscriptions(t)
		noLeak(nil)
	})
}

// The watchdog renews the permits of many Leases in batches, per slot.
func TestRedissonPermitExpirableSemaphoreManyHolders(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, time.Minute)
		c := e.client(t, redisync.WithWatchdogLease(600*time.Millisecond))
		var leases []*redisync.Lease
		var sems []*PermitExpirableSemaphore
		for i := range 20 {
			s := c.PermitExpirableSemaphore("rpsem-many-" + strconv.Itoa(i%5) + "-" + e.Name)
			if i < 5 {
				_, err := s.TrySetPermits(ctx, 10)
				require.NoError(t, err)
			}
			leases = append(leases, mustLock(t, ctx, psemLock(s, 1+i%2)))
			sems = append(sems, s)
		}
		time.Sleep(1500 * time.Millisecond)
		for i, l := range leases {
			require.NoError(t, l.Err(), "lease %d renewed", i)
			for _, id := range sems[i].PermitIDs(l) {
				d, err := sems[i].LeaseTime(ctx, id)
				require.NoError(t, err)
				require.LessOrEqual(t, d, 600*time.Millisecond)
			}
		}
		for _, l := range leases {
			require.NoError(t, l.Unlock(ctx))
		}
		for _, s := range sems[:5] {
			n, err := s.AvailablePermits(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 10, n)
		}
		rc := e.RueidisClient(t)
		for _, s := range sems[:5] {
			require.NoError(t, rc.Do(ctx, rc.B().Del().Key(s.Name()).Build()).Error())
		}
	})
}
