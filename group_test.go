package redisync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync/internal/redistest"
)

// groupCase is one way to build a group of names: atomic (one Client, one
// slot: one script) or ordered (one lock at a time).
type groupCase struct {
	name   string
	atomic bool
}

var groupCases = []groupCase{{"atomic", true}, {"ordered", false}}

// groupScenario is a group of three names tagged with the test's name (see
// groupOf), for one groupCase, and its Mutexes, on Clients a and b of e.
type groupScenario struct {
	e     *env
	gc    groupCase
	a, b  *Client
	names []string
	g     *Group
	ms    []*Mutex
}

// eachGroupCase runs f against standalone Redis and the Cluster, for an
// atomic and an ordered group, on two Clients with opts.
func eachGroupCase(t *testing.T, opts []Option, f func(t *testing.T, s groupScenario)) {
	eachEnv(t, func(t *testing.T, e *env) {
		for _, gc := range groupCases {
			t.Run(gc.name, func(t *testing.T) {
				s := groupScenario{e: e, gc: gc, a: e.client(t, opts...), b: e.client(t, opts...)}
				s.names = taggedNames(t.Name(), "x", "y", "z")
				s.g, s.ms = groupOf(t, gc, []*Client{s.a, s.b}, s.names...)
				f(t, s)
			})
		}
	})
}

// groupOf returns a group of names for the case: atomic groups use one
// Client and names of one hash tag; ordered ones spread the names over the
// given Clients (several Clients make any group ordered).
func groupOf(t *testing.T, gc groupCase, clients []*Client, names ...string) (*Group, []*Mutex) {
	t.Helper()
	var ms []*Mutex
	for i, n := range names {
		c := clients[0]
		if !gc.atomic {
			c = clients[i%len(clients)]
		}
		ms = append(ms, c.Mutex(n))
	}
	g := NewGroup(ms...)
	require.NoError(t, g.err)
	require.Equal(t, gc.atomic, g.atomic, "group of %v", names)
	return g, ms
}

// tagged returns names sharing one hash tag, so that they live in one slot.
func taggedNames(tag string, names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "{" + tag + "}:" + n
	}
	return out
}

func requireFree(t *testing.T, ms ...*Mutex) {
	t.Helper()
	for _, m := range ms {
		st, err := m.Inspect(context.Background())
		require.NoError(t, err)
		require.False(t, st.Locked, "%s is still locked by %s", m.name, st.Owner)
	}
}

func eventuallyFree(t *testing.T, d time.Duration, ms ...*Mutex) {
	t.Helper()
	eventually(t, d, func() bool {
		for _, m := range ms {
			st, err := m.Inspect(context.Background())
			if err != nil || st.Locked {
				return false
			}
		}
		return true
	}, "locks not released")
}

func TestGroupLockUnlock(t *testing.T) {
	eachGroupCase(t, []Option{WithPrefix("glu")}, func(t *testing.T, s groupScenario) {
		ctx := context.Background()
		gc, b, names, g, ms := s.gc, s.b, s.names, s.g, s.ms
		l := mustLock(t, ctx, g.Lock)
		require.NoError(t, l.Err())
		require.NotZero(t, l.Token())
		require.Equal(t, fmt.Sprintf("%q", names), l.Name())
		require.Equal(t, names, g.Names())
		for _, m := range ms {
			st, err := m.Inspect(ctx)
			require.NoError(t, err)
			require.True(t, st.Locked)
			require.Equal(t, 1, st.Holds)
			require.Equal(t, m.c.ID(), st.ClientID())
			require.LessOrEqual(t, st.Token, l.Token(), "a member's token is at most the group's")
			if gc.atomic {
				require.Equal(t, l.Token(), st.Token, "one token for the whole group")
			}
			require.Greater(t, st.TTL, 20*time.Second)
			// Held for a Mutex of that name, from any Client.
			_, err = b.Mutex(m.name).TryLock(ctx)
			require.ErrorIs(t, err, ErrLocked)
		}
		// Another group over one of the names fails and holds nothing.
		other := NewGroup(b.Mutex(names[1]), b.Mutex(t.Name()+":free"))
		_, err := other.TryLock(ctx)
		require.ErrorIs(t, err, ErrLocked)
		require.Contains(t, err.Error(), names[1])
		requireFree(t, b.Mutex(t.Name()+":free"))

		select {
		case <-l.Lost():
			t.Fatal("Lost closed while held")
		default:
		}
		require.NoError(t, l.Unlock(ctx))
		require.ErrorIs(t, l.Err(), ErrReleased)
		require.ErrorIs(t, context.Cause(l.Context()), ErrReleased)
		require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
		select {
		case <-l.Lost():
			t.Fatal("Lost closed by Unlock")
		default:
		}
		requireFree(t, ms...)

		requireLaterToken(t, ctx, g.TryLock, l)
		requireFree(t, ms...)
	})
}

// countingClient counts the round trips (Do and DoMulti calls) and the
// commands the library sends.
type countingClient struct {
	rueidis.Client
	calls, cmds atomic.Int64
}

func (c *countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.calls.Add(1)
	c.cmds.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *countingClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.calls.Add(1)
	c.cmds.Add(int64(len(cmds)))
	return c.Client.DoMulti(ctx, cmds...)
}

func TestGroupOneSlotOneRoundTrip(t *testing.T) {
	e := ownServer(t)
	ctx := context.Background()
	rc := &countingClient{Client: e.rueidisClient(t)}
	// A long lease: no renewal runs while the commands are counted.
	c, err := New(rc, WithLogger(quietLogger()), WithWatchdogLease(time.Hour))
	require.NoError(t, err)
	defer c.Close()
	g := NewGroup(c.Mutex("rt:a"), c.Mutex("rt:b"), c.Mutex("rt:c"))
	require.True(t, g.atomic)
	// Loads the script into the server.
	l := mustLock(t, ctx, g.Lock)
	require.NoError(t, l.Unlock(ctx))

	before := commandCalls(t, e.server)
	rc.calls.Store(0)
	rc.cmds.Store(0)
	l, err = g.Lock(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, rc.calls.Load(), "round trips to acquire a group of 3 locks")
	require.EqualValues(t, 1, rc.cmds.Load(), "commands to acquire a group of 3 locks")
	d := commandDelta(t, before, commandCalls(t, e.server))
	require.EqualValues(t, 1, d.client, "commands the server received: %v", d.calls)
	require.EqualValues(t, 1, d.calls["evalsha"], "commands the server received: %v", d.calls)

	rc.calls.Store(0)
	rc.cmds.Store(0)
	require.NoError(t, l.Unlock(ctx))
	require.EqualValues(t, 1, rc.calls.Load(), "round trips to release a group of 3 locks")
	require.EqualValues(t, 1, rc.cmds.Load(), "commands to release a group of 3 locks")
	requireFree(t, g.ms...)
}

func TestGroupWaitsForMutexAndReenters(t *testing.T) {
	eachGroupCase(t, []Option{WithPrefix("gwait")}, func(t *testing.T, s groupScenario) {
		ctx := withTimeout(t, 30*time.Second)
		e, gc, a, b, names, g, ms := s.e, s.gc, s.a, s.b, s.names, s.g, s.ms

		// A Mutex holds y: the group waits, holding nothing (atomic)
		// or what comes before y (ordered).
		held := mustLock(t, ctx, b.Mutex(names[1]).Lock)
		got := g.Acquire(ctx)
		time.Sleep(100 * time.Millisecond)
		select {
		case l := <-got:
			t.Fatalf("acquired while a member is held: %v", l.Err())
		default:
		}
		if gc.atomic {
			requireFree(t, ms[0], ms[2])
		}
		start := time.Now()
		require.NoError(t, held.Unlock(ctx))
		var l *Lease
		select {
		case l = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the group did not get the released lock")
		}
		require.NoError(t, l.Err())
		require.Less(t, time.Since(start), 5*time.Second, "woken by the release, not by the lease")

		// The group holds x for Mutexes; its Context re-enters x.
		_, err := a.Mutex(names[0]).TryLock(ctx)
		require.ErrorIs(t, err, ErrLocked)
		inner := mustLock(t, l.Context(), ms[0].Lock)
		st, err := ms[0].Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, st.Holds)
		require.NoError(t, inner.Unlock(ctx))
		require.NoError(t, l.Unlock(ctx))
		requireFree(t, ms...)

		// A group acquired with the Context of a Mutex lease of one of
		// its names re-enters that lock; its Unlock leaves it held.
		outer := mustLock(t, ctx, ms[2].Lock)
		l, err = g.TryLock(outer.Context())
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
		st, err = ms[2].Inspect(ctx)
		require.NoError(t, err)
		require.True(t, st.Locked)
		require.Equal(t, 1, st.Holds)
		requireFree(t, ms[0], ms[1])
		require.NoError(t, outer.Unlock(ctx))
		requireFree(t, ms...)
		e.requireNoSubscriptions(t)
	})
}

func TestGroupLostWhenAMemberIsLost(t *testing.T) {
	eachGroupCase(t, []Option{WithPrefix("glost"), WithWatchdogLease(600 * time.Millisecond)}, func(t *testing.T, s groupScenario) {
		ctx := context.Background()
		names, g, ms := s.names, s.g, s.ms
		l := mustLock(t, ctx, g.Lock)
		ok, err := ms[1].ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		requireLost(t, l, 5*time.Second, ErrExpired)
		require.Contains(t, l.Err().Error(), names[1])
		require.ErrorIs(t, context.Cause(l.Context()), ErrExpired)
		// The other members are released at once, not at expiry.
		eventuallyFree(t, 2*time.Second, ms...)
		require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
		require.ErrorIs(t, l.Unlock(ctx), ErrExpired)
	})
}

// TestGroupDeadlineFollowsItsMembers: a group's Deadline is its members'
// earliest, and moves forward as the watchdog renews them.
func TestGroupDeadlineFollowsItsMembers(t *testing.T) {
	const lease = 600 * time.Millisecond
	eachGroupCase(t, []Option{WithPrefix("gdeadline"), WithWatchdogLease(lease)}, func(t *testing.T, s groupScenario) {
		ctx := context.Background()
		l := mustLock(t, ctx, s.g.Lock)
		first, ok := l.Deadline()
		require.True(t, ok)
		require.WithinDuration(t, time.Now().Add(lease*9/10), first, lease)
		for range 3 {
			time.Sleep(lease)
			d, ok := l.Deadline()
			require.True(t, ok)
			require.True(t, d.After(time.Now()), "Deadline %v is past while the group holds", time.Until(d))
			require.True(t, d.After(first), "Deadline did not move with the renewals")
		}
		require.NoError(t, l.Unlock(ctx))
		_, ok = l.Deadline()
		require.False(t, ok)
	})
}

// A Group lease's Deadline read while the group is released (an Unlock,
// or the release after a member's loss) reads nothing the release writes:
// the race detector sees the two run side by side.
func TestGroupDeadlineWhileReleased(t *testing.T) {
	eachGroupCase(t, []Option{WithPrefix("gdeadlinerel")}, func(t *testing.T, s groupScenario) {
		ctx := withTimeout(t, 30*time.Second)
		for range 20 {
			l := mustLock(t, ctx, s.g.Lock)
			stop, started := make(chan struct{}), make(chan struct{})
			read := make(chan int)
			go func() {
				l.Deadline()
				close(started)
				n := 1
				for {
					select {
					case <-stop:
						read <- n
						return
					default:
					}
					l.Deadline()
					n++
				}
			}()
			<-started // the reads run on while the Unlock below does
			require.NoError(t, l.Unlock(ctx))
			close(stop)
			require.Positive(t, <-read, "Deadline never read during the release")
			_, ok := l.Deadline()
			require.False(t, ok, "a released group has a Deadline")
		}
	})
}

func TestGroupFixedLeases(t *testing.T) {
	e := standaloneEnv(t)
	ctx := context.Background()
	c := e.client(t, WithPrefix("gfixed"))
	const lease = 400 * time.Millisecond
	g := NewGroup(c.Mutex("a", WithFixedLease(lease)), c.Mutex("b", WithFixedLease(time.Minute)))
	l := mustLock(t, ctx, g.Lock)
	start := time.Now()
	requireLost(t, l, 5*time.Second, ErrExpired)
	require.Less(t, time.Since(start), lease, "reported lost before the shortest lease ends")
	eventuallyFree(t, 2*time.Second, g.ms...)
}

func TestGroupClientClosed(t *testing.T) {
	e := ownServer(t)
	noLeak := leakCheck(t)
	ctx := withTimeout(t, 30*time.Second)
	a, b, other := e.client(t), e.client(t), e.client(t)
	g := NewGroup(a.Mutex("x"), b.Mutex("y"))
	l := mustLock(t, ctx, g.Lock)

	// A group waiting for a lock held elsewhere.
	held := mustLock(t, ctx, other.Mutex("w").Lock)
	waiting := NewGroup(a.Mutex("v"), b.Mutex("w")).Acquire(ctx)
	e.awaitChannels(t, 1, 5*time.Second, "the waiting group did not subscribe")

	closed := make(chan struct{})
	go func() {
		a.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs")
	}
	requireLost(t, l, 5*time.Second, ErrClosed)
	require.ErrorIs(t, delivered(t, waiting).Err(), ErrClosed)
	// The member on b is released at once.
	eventuallyFree(t, 2*time.Second, other.Mutex("x"), other.Mutex("y"), other.Mutex("v"))
	require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
	_, err := g.Lock(ctx)
	require.ErrorIs(t, err, ErrClosed)

	require.NoError(t, held.Unlock(ctx))
	e.requireNoSubscriptions(t)
	noLeak([]*Client{b, other})
}

func TestGroupTryLockTakesNothing(t *testing.T) {
	eachGroupCase(t, []Option{WithPrefix("gtry")}, func(t *testing.T, s groupScenario) {
		ctx := context.Background()
		e, g, ms := s.e, s.g, s.ms
		// The last lock in the group's order is held elsewhere.
		last := ms[len(ms)-1]
		held, err := e.client(t, WithPrefix("gtry")).Mutex(last.name).Lock(ctx)
		require.NoError(t, err)
		_, err = g.TryLock(ctx)
		require.ErrorIs(t, err, ErrLocked)
		requireFree(t, ms[:len(ms)-1]...)
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err = g.Lock(short)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		requireFree(t, ms[:len(ms)-1]...)
		require.NoError(t, held.Unlock(ctx))
	})
}

// The group's token is greater than every earlier token of each name, and
// every later token of any name is greater than it, also for names whose
// own token is lower (taken first, one at a time).
func TestGroupFencingTokens(t *testing.T) {
	eachGroupCase(t, []Option{WithPrefix("gfence")}, func(t *testing.T, s groupScenario) {
		ctx := context.Background()
		gc, g, ms := s.gc, s.g, s.ms
		var before uint64
		for _, m := range ms {
			l := mustLock(t, ctx, m.Lock)
			before = max(before, l.Token())
			require.NoError(t, l.Unlock(ctx))
		}
		l := mustLock(t, ctx, g.Lock)
		T := l.Token()
		require.Greater(t, T, before)
		if !gc.atomic {
			st, err := ms[0].Inspect(ctx)
			require.NoError(t, err)
			require.Less(t, st.Token, T, "the first lock taken has an older token of its own")
		}
		require.NoError(t, l.Unlock(ctx))
		for _, m := range ms {
			ml := mustLock(t, ctx, m.Lock)
			require.Greater(t, ml.Token(), T, "later token of %s", m.name)
			require.NoError(t, ml.Unlock(ctx))
		}
	})
}

// Overlapping groups over Mutexes of several Clients, atomic and ordered,
// and plain Mutexes never deadlock and never hold one name twice.
func TestGroupOverlappingNeverDeadlock(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		const prefix = "goverlap"
		ctx := withTimeout(t, 2*time.Minute)
		clients := e.clients(t, 4, WithPrefix(prefix))
		// In one slot, so that single-Client groups are atomic on Cluster
		// too; ordered groups mix Clients.
		names := taggedNames("ov", "a", "b", "c", "d", "e", "f")
		inUse := make(map[string]*atomic.Int32)
		for _, n := range names {
			inUse[n] = new(atomic.Int32)
		}
		var overlaps, groups, atomics atomic.Int64
		iterations := soak(40, 400)
		var wg sync.WaitGroup
		for w := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range iterations {
					picked := slices.Clone(names)
					rand.Shuffle(len(picked), func(i, j int) { picked[i], picked[j] = picked[j], picked[i] })
					picked = picked[:1+rand.IntN(4)]
					var l *Lease
					var err error
					if w%4 == 3 && len(picked) == 1 {
						l, err = clients[rand.IntN(len(clients))].Mutex(picked[0]).Lock(ctx)
					} else {
						var ms []*Mutex
						single := rand.IntN(2) == 0
						c := clients[rand.IntN(len(clients))]
						for _, n := range picked {
							if !single {
								c = clients[rand.IntN(len(clients))]
							}
							ms = append(ms, c.Mutex(n))
						}
						g := NewGroup(ms...)
						if g.atomic {
							atomics.Add(1)
						}
						groups.Add(1)
						l, err = g.Lock(ctx)
					}
					if err != nil {
						t.Errorf("Lock %v: %v", picked, err)
						return
					}
					for _, n := range picked {
						if inUse[n].Add(1) != 1 {
							overlaps.Add(1)
						}
					}
					time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
					for _, n := range picked {
						inUse[n].Add(-1)
					}
					if err := l.Unlock(ctx); err != nil {
						t.Errorf("Unlock %v: %v", picked, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		require.Zero(t, overlaps.Load(), "a name was held twice")
		require.NoError(t, ctx.Err(), "deadlock: the acquisitions did not finish")
		t.Logf("%d groups (%d atomic), %d acquisitions in all", groups.Load(), atomics.Load(), 12*iterations)
		require.NotZero(t, atomics.Load())
		require.Less(t, atomics.Load(), groups.Load())
		e.requireNothingLeft(t, prefix+":")
	})
}

func TestGroupCancellationsLeaveNothing(t *testing.T) {
	names := []string{"a", "b", "c", "{d}", "{d}:e"}
	eachEnv(t, func(t *testing.T, e *env) {
		cancellations(t, e, "gcancel", soak(3000, 30000), below(5*time.Millisecond), func(ctx context.Context, c *Client, clients []*Client) (*Lease, error) {
			picked := slices.Clone(names)
			rand.Shuffle(len(picked), func(i, j int) { picked[i], picked[j] = picked[j], picked[i] })
			mixed := rand.IntN(2) == 0
			var ms []*Mutex
			for _, n := range picked[:1+rand.IntN(3)] {
				if mixed {
					c = clients[rand.IntN(len(clients))]
				}
				ms = append(ms, c.Mutex(n))
			}
			g := NewGroup(ms...)
			return oneOf(g.Lock, g.TryLock, waited(g.Acquire))(ctx)
		})
	})
}

func TestGroupBadInput(t *testing.T) {
	e := standaloneEnv(t)
	ctx := context.Background()
	c := e.client(t, WithPrefix("gbad"))
	closed := e.client(t, WithPrefix("gbad"))
	require.NoError(t, closed.Close())
	var nilCtx context.Context
	for _, tc := range []struct {
		name string
		g    *Group
		want error
	}{
		{"no locks", NewGroup(), ErrInvalidArgument},
		{"nil mutex", NewGroup(c.Mutex("a"), nil), ErrInvalidArgument},
		{"empty name", NewGroup(c.Mutex("")), ErrInvalidArgument},
		{"bad option", NewGroup(c.Mutex("a", WithFixedLease(time.Microsecond))), ErrInvalidArgument},
		{"nil client", NewGroup((*Client)(nil).Mutex("a")), ErrInvalidArgument},
		{"zero mutex", NewGroup(&Mutex{}), ErrInvalidArgument},
		{"twice", NewGroup(c.Mutex("a"), c.Mutex("b"), c.Mutex("a")), ErrInvalidArgument},
		{"zero group", &Group{}, ErrInvalidArgument},
		{"nil group", nil, ErrInvalidArgument},
		{"closed client", NewGroup(c.Mutex("a"), closed.Mutex("b")), ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireLockFails(t, "Group", tc.g, tc.want)
			if tc.want == ErrInvalidArgument {
				require.Nil(t, tc.g.Names())
			}
		})
	}
	g := NewGroup(c.Mutex("a"))
	_, err := g.Lock(nilCtx)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = g.TryLock(nilCtx)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorIs(t, (<-g.Acquire(nilCtx)).Err(), ErrInvalidArgument)
	l := mustLock(t, ctx, g.Lock)
	require.ErrorIs(t, l.Unlock(nilCtx), ErrInvalidArgument)
	require.NoError(t, l.Unlock(ctx))

	// The same name from two Clients of one deployment is two locks for the
	// library; a group of one lock is a lock.
	one := NewGroup(c.Mutex("solo"))
	l, err = one.TryLock(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
}

// ---- Quorum ----

// quorumEnv starts n independent servers and one Client on each; all are
// stopped at the end of the test.
func quorumEnv(t testing.TB, n int, opts ...Option) ([]*redistest.Server, []*Client) {
	t.Helper()
	var servers []*redistest.Server
	for range n {
		servers = append(servers, redistest.Standalone(t))
	}
	return servers, clientsOf(t, servers, opts...)
}

// clientsOf returns a Client of each server.
func clientsOf(t testing.TB, servers []*redistest.Server, opts ...Option) []*Client {
	t.Helper()
	var clients []*Client
	for _, s := range servers {
		clients = append(clients, dial(t, []string{s.Addr}, opts...))
	}
	return clients
}

// serverLocks returns the lock keys (fencing counters left out) on s.
func serverLocks(t testing.TB, s *redistest.Server) []string {
	t.Helper()
	return leftOver(t, s, "*")
}

func requireNoLocks(t testing.TB, servers ...*redistest.Server) {
	t.Helper()
	for i, s := range servers {
		require.Empty(t, serverLocks(t, s), "server %d", i)
	}
}

func TestQuorumSurvivesAMinorityOfKilledServers(t *testing.T) {
	servers, clients := quorumEnv(t, 5)
	ctx := withTimeout(t, time.Minute)
	q := NewQuorum("orders", clients)
	l, err := q.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))

	require.NoError(t, servers[1].Kill())
	require.NoError(t, servers[3].Kill())
	live := []*redistest.Server{servers[0], servers[2], servers[4]}
	start := time.Now()
	l, err = q.Lock(ctx)
	require.NoError(t, err, "3 of 5 servers are up")
	t.Logf("acquired with 2 of 5 servers killed in %v", time.Since(start))
	require.NotZero(t, l.Token())
	require.Equal(t, "orders", l.Name())
	for _, i := range []int{0, 2, 4} {
		st, err := clients[i].Mutex("orders").Inspect(ctx)
		require.NoError(t, err)
		require.True(t, st.Locked, "server %d", i)
		require.LessOrEqual(t, st.Token, l.Token())
	}
	require.NoError(t, l.Unlock(ctx), "released on a majority")
	requireNoLocks(t, live...)

	require.NoError(t, servers[0].Kill())
	_, err = q.TryLock(ctx)
	require.ErrorIs(t, err, ErrNoQuorum)
	require.Contains(t, err.Error(), "of 5 servers granted \"orders\", 3 needed")
	require.Contains(t, err.Error(), "server 0")
	requireNoLocks(t, servers[2], servers[4])
	short, cancel2 := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = q.Lock(short)
	cancel2()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, ErrNoQuorum, "Lock retried until its context ended")
	requireNoLocks(t, servers[2], servers[4])
	l = <-q.Acquire(short)
	require.ErrorIs(t, l.Err(), context.DeadlineExceeded)
}

func TestQuorumLostWhenAMajorityIsLost(t *testing.T) {
	const lease = time.Second
	servers, clients := quorumEnv(t, 5, WithWatchdogLease(lease))
	ctx := context.Background()
	q := NewQuorum("lost", clients)
	l := mustLock(t, ctx, q.Lock)

	// One server, then a second, can go: a majority still holds.
	require.NoError(t, servers[0].Kill())
	require.NoError(t, servers[1].Pause())
	defer servers[1].Resume()
	select {
	case <-l.Lost():
		t.Fatalf("lost with 3 of 5 servers holding: %v", l.Err())
	case <-time.After(2 * lease):
	}
	require.NoError(t, l.Err())
	require.NoError(t, servers[2].Kill())
	killed := time.Now()
	requireLost(t, l, 5*time.Second, ErrNoQuorum)
	require.Less(t, time.Since(killed), lease, "reported before the members could expire")
	require.ErrorIs(t, l.Err(), ErrConnectionLost)
	require.ErrorIs(t, context.Cause(l.Context()), ErrNoQuorum)
	// What is still held is released at once.
	eventually(t, 2*time.Second, func() bool {
		return len(serverLocks(t, servers[3])) == 0 && len(serverLocks(t, servers[4])) == 0
	}, "locks left on the live servers")
	require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
}

func TestQuorumMutualExclusionAndTokens(t *testing.T) {
	servers, _ := quorumEnv(t, 5)
	ctx := withTimeout(t, 2*time.Minute)
	// Four processes, each with its own Clients.
	var quorums []*Quorum
	for range 4 {
		quorums = append(quorums, NewQuorum("exclusive", clientsOf(t, servers)))
	}
	var (
		inside atomic.Int32
		mu     sync.Mutex
		last   uint64
		count  int
	)
	iterations := soak(25, 250)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := quorums[w%len(quorums)]
			for range iterations {
				l, err := q.Lock(ctx)
				if err != nil {
					t.Errorf("Lock: %v", err)
					return
				}
				if inside.Add(1) != 1 {
					t.Error("two holders at once")
				}
				mu.Lock()
				if l.Token() <= last {
					t.Errorf("token %d after %d", l.Token(), last)
				}
				last = l.Token()
				count++
				mu.Unlock()
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("Unlock: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 8*iterations, count)
	requireNoLocks(t, servers...)
	quorumGates.Lock()
	defer quorumGates.Unlock()
	require.Empty(t, quorumGates.m, "gates left")
}

func TestQuorumContention(t *testing.T) {
	servers, clients := quorumEnv(t, 3)
	ctx := withTimeout(t, 30*time.Second)
	others := clientsOf(t, servers)
	a, b := NewQuorum("busy", clients), NewQuorum("busy", others)
	l := mustLock(t, ctx, a.Lock)
	_, err := b.TryLock(ctx)
	require.ErrorIs(t, err, ErrNoQuorum)
	require.ErrorIs(t, err, ErrLocked)
	// A Mutex of the name on one server waits as well.
	_, err = others[0].Mutex("busy").TryLock(ctx)
	require.ErrorIs(t, err, ErrLocked)

	got := b.Acquire(ctx)
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	require.NoError(t, l.Unlock(ctx))
	bl := recv(t, got, 10*time.Second, "the waiter did not get the lock")
	require.Less(t, time.Since(start), 5*time.Second, "woken by the release, not by the lease")
	require.Greater(t, bl.Token(), l.Token())
	// Re-entry through the lease's Context.
	inner := mustLock(t, bl.Context(), b.TryLock)
	require.NoError(t, inner.Unlock(ctx))
	require.NoError(t, bl.Unlock(ctx))
	requireNoLocks(t, servers...)
}

// A server that does not answer delays an acquisition by the per-server
// timeout only; what it granted late is released as soon as it answers.
func TestQuorumPausedServer(t *testing.T) {
	servers, clients := quorumEnv(t, 5, WithWatchdogLease(2*time.Second))
	ctx := context.Background()
	q := NewQuorum("paused", clients)
	warm := mustLock(t, ctx, q.Lock)
	require.NoError(t, warm.Unlock(ctx))

	require.NoError(t, servers[0].Pause())
	start := time.Now()
	l, err := q.Lock(ctx)
	took := time.Since(start)
	require.NoError(t, err)
	require.Less(t, took, time.Second, "timeout per server: %v", q.timeout)
	t.Logf("acquired with 1 of 5 servers paused in %v (per-server timeout %v)", took, q.timeout)
	require.NoError(t, servers[0].Resume())
	eventually(t, 5*time.Second, func() bool { return len(serverLocks(t, servers[0])) == 0 }, "the late grant was not released")
	require.NoError(t, l.Unlock(ctx))
	requireNoLocks(t, servers...)
}

// Tokens keep increasing across quorum ownerships when a server whose
// counter ran ahead (its clock is ahead) is no longer among them: the
// counter of a majority was raised to the group's token.
func TestQuorumTokensDoNotDependOnClocks(t *testing.T) {
	servers, clients := quorumEnv(t, 3)
	ctx := context.Background()
	q := NewQuorum("clock", clients)
	// Server 0's counter is far ahead, as if its clock were.
	ahead := uint64(time.Now().Add(time.Hour).UnixMicro())
	m0 := clients[0].Mutex("clock")
	_, err := servers[0].Do("HSET", m0.keys.lock, "token", strconv.FormatUint(ahead, 10))
	require.NoError(t, err)
	l := mustLock(t, ctx, q.Lock)
	require.Greater(t, l.Token(), ahead)
	for i := 1; i < 3; i++ {
		v, err := servers[i].Do("HGET", m0.keys.lock, "t")
		require.NoError(t, err)
		raised, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err)
		require.Equal(t, l.Token(), raised, "counter of server %d", i)
	}
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, servers[0].Kill())
	requireLaterToken(t, ctx, q.Lock, l)
}

// An ownership that expired under a paused holder is followed by one with a
// greater token.
func TestQuorumFixedLeaseExpiry(t *testing.T) {
	_, clients := quorumEnv(t, 3)
	ctx := context.Background()
	const lease = 300 * time.Millisecond
	q := NewQuorum("fixed", clients, WithFixedLease(lease))
	l := mustLock(t, ctx, q.Lock)
	start := time.Now()
	requireLost(t, l, 5*time.Second, ErrNoQuorum)
	require.Less(t, time.Since(start), lease)
	require.ErrorIs(t, l.Err(), ErrExpired)
	requireLaterToken(t, ctx, q.Lock, l)
}

// Cancelled acquisitions, with contention and a server that does not
// answer, leave nothing held on any server: the answering ones at once, the
// hung one once it answers (an acquisition it runs after the release sent
// to it expires with its lease, here a second).
func TestQuorumCancellationsLeaveNothing(t *testing.T) {
	servers, _ := quorumEnv(t, 5)
	noLeak := leakCheck(t)
	var groups [][]*Client
	var clients []*Client
	for range 3 {
		cs := clientsOf(t, servers, WithWatchdogLease(time.Second))
		groups = append(groups, cs)
		clients = append(clients, cs...)
	}
	quorums := make([]*Quorum, 12)
	for i := range quorums {
		quorums[i] = NewQuorum(fmt.Sprintf("qcancel:%d", i%3), groups[i%len(groups)])
	}
	total := soak(600, 6000)
	var acquired, unconfirmed atomic.Int64
	spread(total, len(quorums), func(w, n int) {
		if n == total/2 {
			// From now on one server hangs.
			if err := servers[4].Pause(); err != nil {
				t.Error(err)
			}
		}
		ctx := withTimeout(t, rand.N(100*time.Millisecond))
		q := quorums[w]
		l, err := oneOf(q.Lock, waited(q.Acquire))(ctx)
		if err != nil {
			return
		}
		acquired.Add(1)
		switch err := l.Unlock(context.Background()); {
		case err == nil, errors.Is(err, ErrNotHeld):
		case errors.Is(err, context.DeadlineExceeded):
			// The hung server held one of a bare majority.
			unconfirmed.Add(1)
		default:
			t.Error(err)
		}
	})
	requireNoLocks(t, servers[:4]...)
	require.NoError(t, servers[4].Resume())
	t.Logf("%d attempts, %d acquired, %d releases unconfirmed while a server hung", total, acquired.Load(), unconfirmed.Load())
	require.NotZero(t, acquired.Load())
	for i, s := range servers {
		eventually(t, 10*time.Second, func() bool { return len(serverLocks(t, s)) == 0 }, "locks left on server %d: %v", i, serverLocks(t, s))
	}
	noLeak(clients)
	quorumGates.Lock()
	require.Empty(t, quorumGates.m, "gates left")
	quorumGates.Unlock()
}

func TestQuorumBadInput(t *testing.T) {
	e := standaloneEnv(t)
	ctx := context.Background()
	c1, c2 := e.client(t, WithPrefix("qbad1")), e.client(t, WithPrefix("qbad2"))
	closed := e.client(t, WithPrefix("qbad3"))
	require.NoError(t, closed.Close())
	var nilCtx context.Context
	for _, tc := range []struct {
		name string
		q    *Quorum
		want error
	}{
		{"no clients", NewQuorum("a", nil), ErrInvalidArgument},
		{"nil client", NewQuorum("a", []*Client{c1, nil}), ErrInvalidArgument},
		{"twice", NewQuorum("a", []*Client{c1, c2, c1}), ErrInvalidArgument},
		{"empty name", NewQuorum("", []*Client{c1, c2}), ErrInvalidArgument},
		{"bad option", NewQuorum("a", []*Client{c1}, WithFixedLease(0)), ErrInvalidArgument},
		{"zero", &Quorum{}, ErrInvalidArgument},
		{"nil", nil, ErrInvalidArgument},
		{"closed client", NewQuorum("a", []*Client{c1, closed, c2}), ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireLockFails(t, "Quorum", tc.q, tc.want)
		})
	}
	q := NewQuorum("a", []*Client{c1, c2})
	require.Equal(t, "a", q.Name())
	require.Equal(t, "", (*Quorum)(nil).Name())
	_, err := q.Lock(nilCtx)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorIs(t, (<-q.Acquire(nilCtx)).Err(), ErrInvalidArgument)
	// Two servers: both are needed.
	l := mustLock(t, ctx, q.TryLock)
	require.NoError(t, l.Unlock(ctx))
}

// ---- Benchmarks ----

// BenchmarkGroup3Locks measures Lock+Unlock of a group of 3 free locks on
// the standalone server: atomic (one Client: one script each way) and
// ordered (three Clients: one lock at a time, then one release per
// Client). ns/op is the time per acquire+release, lock-µs the mean time of
// the acquisition alone.
func BenchmarkGroup3Locks(b *testing.B) {
	e := standaloneEnv(b)
	for _, bc := range []struct {
		name    string
		clients int
	}{{"atomic", 1}, {"ordered", 3}} {
		b.Run(bc.name, func(b *testing.B) {
			cs := e.clients(b, bc.clients)
			var ms []*Mutex
			for i, n := range []string{"bench:group:a", "bench:group:b", "bench:group:c"} {
				ms = append(ms, cs[i%len(cs)].Mutex(n))
			}
			g := NewGroup(ms...)
			benchGroup(b, e, func(ctx context.Context) (*Lease, error) { return g.Lock(ctx) })
		})
	}
}

// BenchmarkQuorum5Servers measures Lock+Unlock of a Quorum over 5
// independent servers on loopback: one attempt on all of them, the fencing
// counters raised on four, one release on all of them.
func BenchmarkQuorum5Servers(b *testing.B) {
	_, clients := quorumEnv(b, 5)
	q := NewQuorum("bench:quorum", clients)
	benchGroup(b, nil, func(ctx context.Context) (*Lease, error) { return q.Lock(ctx) })
}

func benchGroup(b *testing.B, e *env, lock func(context.Context) (*Lease, error)) {
	ctx := context.Background()
	for range 10 { // warm-up: scripts loaded, watchdogs running
		benchLockUnlock(b, lock)
	}
	var before map[string]int64
	if e != nil {
		before = commandCalls(b, e.server)
	}
	var locking time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		l, err := lock(ctx)
		locking += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(locking.Microseconds())/float64(b.N), "lock-µs")
	if e != nil {
		reportCommands(b, commandDelta(b, before, commandCalls(b, e.server)), b.N, "op")
	}
}

// A group reports to Metrics as "group" (a Quorum as "quorum"), and each of
// its locks as a "mutex".
func TestGroupMetrics(t *testing.T) {
	e := standaloneEnv(t)
	ctx := context.Background()
	var r recorder
	m := r.metrics()
	a := e.client(t, WithPrefix("gmetrics"), WithMetrics(m), WithWatchdogLease(600*time.Millisecond))
	b := e.client(t, WithPrefix("gmetrics"), WithMetrics(m))
	count := func(p string) (int, int) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.acquired[p], r.released[p]
	}
	for _, g := range []*Group{
		NewGroup(a.Mutex("x"), a.Mutex("y")), // atomic
		NewGroup(a.Mutex("x"), b.Mutex("y")), // ordered
	} {
		l := mustLock(t, ctx, g.Lock)
		require.NoError(t, l.Unlock(ctx))
	}
	acquired, released := count("group")
	require.Equal(t, 2, acquired)
	require.Equal(t, 2, released)
	acquired, released = count("mutex")
	require.Equal(t, 4, acquired)
	require.Equal(t, 4, released)

	q := NewQuorum("q", []*Client{a, b, e.client(t, WithPrefix("gmetrics3"), WithMetrics(m))})
	l, err := q.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	acquired, released = count("quorum")
	require.Equal(t, 1, acquired)
	require.Equal(t, 1, released)
	// A server that answers after the majority may be left out.
	acquired, released = count("mutex")
	require.Contains(t, []int{6, 7}, acquired)
	require.Equal(t, acquired, released)

	l, err = NewGroup(a.Mutex("x"), a.Mutex("y")).Lock(ctx)
	require.NoError(t, err)
	_, err = a.Mutex("y").ForceUnlock(ctx)
	require.NoError(t, err)
	<-l.Lost()
	eventually(t, 5*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.lost[ErrForceUnlocked] == 1 && r.lost[l.Err()] == 1
	}, "losses not reported: %v", r.lost)
}

// lockWhileMemberLost runs lock, a Group's or a Quorum's, and once raised
// is closed (a raise of a member's fencing counter sent, its answer held
// back) calls lose, which loses another member and waits until its Client
// reported it, then answer, which lets the raise answer. The Lease that
// lock then returns must be live and hold every lock of held, with tokens
// at most its own: a member lost while the counters were raised is not
// counted.
func lockWhileMemberLost(t *testing.T, ctx context.Context, lock func(context.Context) (*Lease, error), raised <-chan struct{}, lose, answer func(), held ...*Mutex) *Lease {
	t.Helper()
	type result struct {
		l   *Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := lock(ctx)
		done <- result{l, err}
	}()
	select {
	case <-raised:
	case <-time.After(5 * time.Second):
		t.Fatal("no fencing counter was raised")
	}
	lose()
	answer()
	var res result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Lock did not return")
	}
	require.NoError(t, res.err)
	require.NoError(t, res.l.Err(), "delivered with a member lost")
	for _, m := range held {
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.True(t, st.Locked, "%s not held", m.name)
		require.LessOrEqual(t, st.Token, res.l.Token())
	}
	return res.l
}

// awaitLossReported waits until c reported the loss of its lease of key:
// its watchdog no longer has it.
func awaitLossReported(t *testing.T, c *Client, key string) {
	t.Helper()
	require.Eventually(t, func() bool {
		c.watchdog.mu.Lock()
		defer c.watchdog.mu.Unlock()
		for h := range c.watchdog.holders {
			if h.key == key {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "the loss of %s was not reported", key)
}

// TestQuorumMemberLostWhileCountersRaisedIsNotCounted: a Quorum of three
// servers, one of them held by another Client, takes the other two, then
// raises the fencing counter of the one with the lower token to the
// quorum's. The other, at the quorum's token and so not asked by the raise,
// is lost while the raise's reply is held back (its key deleted, its Client
// told at once). It is not counted towards the majority: the attempt fails,
// and Lock takes the locks again and returns a Lease that holds both.
func TestQuorumMemberLostWhileCountersRaisedIsNotCounted(t *testing.T) {
	servers, _ := quorumEnv(t, 3)
	ctx := withTimeout(t, 30*time.Second)
	name := "raised"
	c0, rf := faultyClientOf(t, []string{servers[0].Addr}, true)
	c1 := dialWith(t, rueidis.ClientOption{InitAddress: []string{servers[1].Addr}})
	c2 := dial(t, []string{servers[2].Addr})
	require.Equal(t, DetectOnChange, c1.LossDetection())
	other := mustLock(t, ctx, dial(t, []string{servers[2].Addr}).Mutex(name).Lock)
	// Server 0's lock keeps the token of an earlier owner; server 1's,
	// taken fresh, gets the server's clock: the quorum's token.
	require.NoError(t, mustLock(t, ctx, c0.Mutex(name).Lock).Unlock(ctx))
	time.Sleep(5 * time.Millisecond)
	r, open := rf.gate(runs(groupFenceScript), 1, false)
	defer open()
	l := lockWhileMemberLost(t, ctx, NewQuorum(name, []*Client{c0, c1, c2}).Lock, r.Ran(), func() {
		_, err := servers[1].Do("DEL", c1.keysFor(name).lock)
		require.NoError(t, err)
		awaitLossReported(t, c1, c1.keysFor(name).lock)
	}, open, c0.Mutex(name), c1.Mutex(name))
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, other.Unlock(ctx))
}

// TestGroupMemberLostWhileCountersRaisedIsNotDelivered: a Group over two
// Clients takes its locks in order, then raises the fencing counter of the
// lock with the lower token to the group's. The other member, at the
// group's token and so not asked by any raise, is lost while that raise's
// reply is held back (its key deleted, its Client told at once). The
// Group is not delivered with a lost member: Lock takes the locks again
// and returns a Lease that holds both.
func TestGroupMemberLostWhileCountersRaisedIsNotDelivered(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c1, rf := e.faultyClient(t)
		c2 := e.client(t)
		require.Equal(t, DetectOnChange, c2.LossDetection())
		admin := e.rueidisClient(t)
		// The first lock keeps the token of an earlier owner; the second,
		// taken fresh, gets the server's clock: the group's token. The
		// names are new at every run, whose locks keep their counters.
		name := t.Name() + ":" + uuid.NewString()
		lo := c1.Mutex(name + ":lo")
		require.NoError(t, mustLock(t, ctx, lo.Lock).Unlock(ctx))
		time.Sleep(5 * time.Millisecond)
		hi := c2.Mutex(name + ":hi")
		r, open := rf.gate(runs(groupFenceScript), 1, false)
		defer open()
		l := lockWhileMemberLost(t, ctx, NewGroup(lo, hi).Lock, r.Ran(), func() {
			require.NoError(t, admin.Do(ctx, admin.B().Del().Key(hi.keys.lock).Build()).Error())
			awaitLossReported(t, c2, hi.keys.lock)
		}, open, lo, hi)
		require.NoError(t, l.Unlock(ctx))
	})
}
