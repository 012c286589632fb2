package redisync

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFairMutexBasics(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.client(t).FairMutex(t.Name())
		l := mustLock(t, ctx, m.Lock)
		require.NotZero(t, l.Token())
		inner, err := m.Lock(l.Context())
		require.NoError(t, err, "re-entry")
		require.Equal(t, l.Token(), inner.Token())
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.True(t, st.Locked)
		require.Equal(t, 2, st.Holds)
		require.Zero(t, st.Waiters)

		_, err = e.client(t).FairMutex(t.Name()).TryLock(ctx)
		require.ErrorIs(t, err, ErrLocked)
		st, _ = m.Inspect(ctx)
		require.Zero(t, st.Waiters, "TryLock never queues")

		require.NoError(t, inner.Unlock(ctx))
		require.NoError(t, l.Unlock(ctx))
		require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
		l2 := mustLock(t, ctx, m.TryLock)
		require.Greater(t, l2.Token(), l.Token())
		require.NoError(t, l2.Unlock(ctx))
		e.requireOnlyFences(t, "redisync:")
	})
}

// queueUp starts n waiters, one after another, each once the one before
// holds its place; it returns their result channels in queue order.
func queueUp(t *testing.T, ctx context.Context, clients []*Client, name string, n int, opts ...LockOption) []<-chan *Lease {
	t.Helper()
	probe := clients[0].FairMutex(name)
	var out []<-chan *Lease
	for i := range n {
		out = append(out, clients[i%len(clients)].FairMutex(name, opts...).Acquire(ctx))
		eventually(t, 5*time.Second, func() bool {
			st, err := probe.Inspect(ctx)
			return err == nil && st.Waiters == i+1
		}, "waiter %d did not queue", i)
	}
	return out
}

func TestFairMutexStrictFIFO(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const waiters = 24
		ctx := withTimeout(t, time.Minute)
		clients := e.clients(t, 4)
		first := mustLock(t, ctx, clients[0].FairMutex(t.Name()).Lock)
		queue := queueUp(t, ctx, clients, t.Name(), waiters)

		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i, ch := range queue {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := <-ch
				if err := l.Err(); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		before := scriptCalls(t, e)
		require.NoError(t, first.Unlock(ctx))
		wg.Wait()
		calls := scriptCalls(t, e) - before
		inversions := 0
		for i := range order {
			for j := i + 1; j < len(order); j++ {
				if order[i] > order[j] {
					inversions++
				}
			}
		}
		require.Zero(t, inversions, "order %v", order)
		// Each grant: the holder's release and the head's one attempt.
		perGrant := float64(calls) / waiters
		t.Logf("%d waiters: %.2f script runs per hand-off", waiters, perGrant)
		require.Less(t, perGrant, 3.0)
		e.requireOnlyFences(t, "redisync:")
	})
}

func TestFairMutexCancelledWaiterLeavesAtOnce(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		a, b := e.client(t), e.client(t)
		held := mustLock(t, ctx, a.FairMutex(t.Name()).Lock)
		wctx, cancel := context.WithCancel(ctx)
		q := queueUp(t, wctx, []*Client{b}, t.Name(), 1)
		cancel()
		require.ErrorIs(t, (<-q[0]).Err(), context.Canceled)
		st, err := a.FairMutex(t.Name()).Inspect(ctx)
		require.NoError(t, err)
		require.Zero(t, st.Waiters, "the cancelled waiter left the queue")
		require.NoError(t, held.Unlock(ctx))
		e.requireNothingLeft(t, "redisync:")
	})
}

// A waiter whose process is gone (here: its network is) keeps its place
// only until it expires; the queue moves on behind it.
func TestFairMutexDeadWaiterPassedOver(t *testing.T) {
	e := ownServer(t)
	ctx := withTimeout(t, time.Minute)
	const expiry = time.Second
	dead, p := e.proxied(t)
	holder, next := e.client(t), e.client(t)

	l := mustLock(t, ctx, holder.FairMutex("dead-waiter").Lock)
	q := queueUp(t, ctx, []*Client{dead, next}, "dead-waiter", 2, WithWaiterExpiry(expiry))
	p.Blackhole() // the first waiter is gone
	require.NoError(t, l.Unlock(ctx))
	released := time.Now()
	nl := recv(t, q[1], 20*time.Second, "second waiter behind a dead one")
	took := time.Since(released)
	t.Logf("second waiter acquired %v after the release, passing over a dead first waiter (expiry %v)", took, expiry)
	require.Less(t, took, expiry+2*time.Second)
	require.NoError(t, nl.Unlock(ctx))
}

func TestFairMutexHolderCrash(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		takesLockOfDeadHolder(t, e, func(c *Client, opts ...LockOption) func(context.Context) (*Lease, error) {
			return c.FairMutex(t.Name(), opts...).Lock
		})
	})
}

func TestFairMutexMutualExclusion(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const clients, perClient, rounds = 3, 3, 30
		ctx := withTimeout(t, 2*time.Minute)
		var n atomic.Int32
		overlaps := contend(t, ctx, e, clients, perClient, rounds, func(c *Client) func(context.Context) (*Lease, error) {
			return c.FairMutex(t.Name()).Lock
		}, func() {
			v := n.Load()
			time.Sleep(time.Duration(rand.IntN(100)) * time.Microsecond)
			n.Store(v + 1)
		})
		require.Zero(t, overlaps)
		require.EqualValues(t, clients*perClient*rounds, n.Load())
		e.requireOnlyFences(t, "redisync:")
	})
}

func TestFairMutexCancellationsLeaveNothing(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		cancellations(t, e, "fcancel", soak(5000, 100000), below(6*time.Millisecond), func(ctx context.Context, c *Client, _ []*Client) (*Lease, error) {
			m := c.FairMutex(strconv.Itoa(rand.IntN(3)))
			return oneOf(m.Lock, waited(m.Acquire))(ctx)
		})
	})
}

func TestFairMutexRedisRestart(t *testing.T) {
	e := ownServer(t)
	ctx := withTimeout(t, time.Minute)
	holder := e.client(t, WithWatchdogLease(time.Second))
	l := mustLock(t, ctx, holder.FairMutex("restart").Lock)
	q := queueUp(t, ctx, []*Client{e.client(t), e.client(t)}, "restart", 4)
	require.NoError(t, e.server.Restart())
	<-l.Lost()
	// The queue is gone with the data; the waiters come back, queue again
	// and get the lock one by one.
	unlockAll(t, ctx, q, 15*time.Second)
}

// BenchmarkFairMutexHandOff drains queues of 1, 10 and 100 waiters (on four
// Clients) and reports, per hand-off, the time and the scripts Redis ran
// (the release and the next waiter's acquisition: constant if the release
// wakes only the head).
func BenchmarkFairMutexHandOff(b *testing.B) {
	for _, waiters := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("waiters=%d", waiters), func(b *testing.B) {
			e := standaloneEnv(b)
			ctx := context.Background()
			clients := e.clients(b, 4)
			name := fmt.Sprintf("bench-fair-%d-%d", waiters, b.N)
			probe := clients[0].FairMutex(name)
			var grants, calls int64
			var elapsed time.Duration
			for grants < int64(b.N) {
				first, err := probe.Lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				var wg sync.WaitGroup
				n := min(waiters, b.N-int(grants))
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						l, err := clients[i%len(clients)].FairMutex(name).Lock(ctx)
						if err == nil {
							l.Unlock(ctx)
						}
					}()
				}
				for {
					st, _ := probe.Inspect(ctx)
					if st.Waiters == n {
						break
					}
					time.Sleep(time.Millisecond)
				}
				before := scriptCalls(b, e)
				start := time.Now()
				first.Unlock(ctx)
				wg.Wait()
				elapsed += time.Since(start)
				calls += scriptCalls(b, e) - before
				grants += int64(n)
			}
			b.ReportMetric(float64(calls)/float64(grants), "scripts/handoff")
			b.ReportMetric(float64(elapsed.Microseconds())/float64(grants), "µs/handoff")
		})
	}
}
