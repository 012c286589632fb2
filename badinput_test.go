package redisync

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync/internal/testenv"
)

// badInputNames are lock names that look troublesome but are valid: every
// one of them must lock, inspect and unlock like any other name.
func badInputNames() []string {
	return []string{
		"{", "}", "{}", "}{", "a}b{c", "{user:7}:cart", "x{}y{z}", "{{}}",
		"with space", "\x00\xff\xfe binary", "\n", "*?[a]\\", "🔒",
		strings.Repeat("n", 100<<10), // 100 KiB
		":",
	}
}

// biCase is one TestBadInput case.
type biCase struct {
	name string
	run  func(t *testing.T, b *bi)
}

// bi is what a TestBadInput case works with.
type bi struct {
	e      *env
	rc     rueidis.Client // a raw connection, to plant and check keys
	prefix string         // the case's own key prefix
}

// client returns a Client that uses the case's prefix; closed at the end of
// the case.
func (b *bi) client(t *testing.T, opts ...Option) *Client {
	t.Helper()
	return b.e.client(t, append([]Option{WithPrefix(b.prefix)}, opts...)...)
}

// ctx returns a context that bounds a call that could otherwise wait for a
// lock forever.
func (b *bi) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// onMasters runs the command cmd builds on every master, through the
// Client's connections, and returns the keys the replies list, binary safe.
func (b *bi) onMasters(t *testing.T, cmd func(n rueidis.Client) rueidis.Completed) map[string]bool {
	t.Helper()
	nodes := b.rc.Nodes()
	out := map[string]bool{}
	for _, m := range b.e.masters() {
		n, ok := nodes[m.Addr]
		require.True(t, ok, "no connection to %s", m.Addr)
		ks, err := n.Do(context.Background(), cmd(n)).AsStrSlice()
		require.NoError(t, err)
		for _, k := range ks {
			out[k] = true
		}
	}
	return out
}

// allKeys lists every key on every master.
func (b *bi) allKeys(t *testing.T) map[string]bool {
	t.Helper()
	return b.onMasters(t, func(n rueidis.Client) rueidis.Completed { return n.B().Keys().Pattern("*").Build() })
}

// requireNoState checks that the case left nothing behind: no key that was
// not there before except fencing counters (see testenv.LeftOverScript), and no
// pub/sub subscription.
func (b *bi) requireNoState(t *testing.T, before map[string]bool) {
	t.Helper()
	left := b.onMasters(t, func(n rueidis.Client) rueidis.Completed {
		return n.B().Eval().Script(testenv.LeftOverScript).Numkeys(0).Arg("*").Build()
	})
	for k := range left {
		if !before[k] {
			short := k
			if len(short) > 80 {
				short = short[:80] + "..."
			}
			t.Errorf("key left behind: %q", short)
		}
	}
	b.e.requireNoSubscriptions(t)
}

// exists reports whether key exists.
func (b *bi) exists(t *testing.T, key string) bool {
	t.Helper()
	n, err := b.rc.Do(context.Background(), b.rc.B().Exists().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	return n == 1
}

// requireFailedLease checks a Lease that reports a failed acquisition.
func requireFailedLease(t *testing.T, l *Lease, reason error) {
	t.Helper()
	require.NotNil(t, l)
	requireHoldsNothing(t, l, reason)
	err := l.Unlock(context.Background())
	require.ErrorIs(t, err, ErrNotHeld)
	require.ErrorIs(t, err, reason)
}

// requireHoldsNothing checks that l holds nothing, for reason: its Err,
// Lost, Context and the Context's cause say so, and it has no token and no
// name.
func requireHoldsNothing(t *testing.T, l *Lease, reason error) {
	t.Helper()
	require.ErrorIs(t, l.Err(), reason)
	select {
	case <-l.Lost():
	default:
		t.Fatal("Lost() of a lease that holds nothing is not closed")
	}
	select {
	case <-l.Context().Done():
	default:
		t.Fatal("Context() of a lease that holds nothing is not done")
	}
	require.ErrorIs(t, context.Cause(l.Context()), reason)
	require.Zero(t, l.Token())
	require.Empty(t, l.Name())
}

// requireAllFail checks that every method of m reports want, and that
// nothing was acquired.
func requireAllFail(t *testing.T, m *Mutex, want error) {
	t.Helper()
	requireLockFails(t, "Mutex", m, want)
	requireOperatorsFail(t, m.Inspect, m.ForceUnlock, want)
}

// requireOperatorsFail checks that a lock's Inspect and ForceUnlock report
// want, and nothing else.
func requireOperatorsFail[S any](t *testing.T, inspect func(context.Context) (S, error), forceUnlock func(context.Context) (bool, error), want error) {
	t.Helper()
	ctx := withTimeout(t, 10*time.Second)
	st, err := inspect(ctx)
	require.ErrorIs(t, err, want, "Inspect")
	require.Zero(t, st)
	ok, err := forceUnlock(ctx)
	require.ErrorIs(t, err, want, "ForceUnlock")
	require.False(t, ok)
}

// exclusiveLock is the acquisitions of every exclusive lock.
type exclusiveLock interface {
	Lock(context.Context) (*Lease, error)
	TryLock(context.Context) (*Lease, error)
	Acquire(context.Context) <-chan *Lease
}

// requireLockFails checks that every acquisition of m reports want.
func requireLockFails(t *testing.T, what string, m exclusiveLock, want error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := m.Lock(ctx)
	require.ErrorIs(t, err, want, "%s.Lock", what)
	require.Nil(t, l)
	l, err = m.TryLock(ctx)
	require.ErrorIs(t, err, want, "%s.TryLock", what)
	require.Nil(t, l)
	requireFailedLease(t, delivered(t, m.Acquire(ctx)), want)
}

// readSide is the read acquisitions of an RWMutex as an exclusiveLock.
type readSide struct{ m *RWMutex }

func (r readSide) Lock(ctx context.Context) (*Lease, error)    { return r.m.RLock(ctx) }
func (r readSide) TryLock(ctx context.Context) (*Lease, error) { return r.m.TryRLock(ctx) }
func (r readSide) Acquire(ctx context.Context) <-chan *Lease   { return r.m.RAcquire(ctx) }

// requireRWMutexFails checks that every method of m reports want, and that
// nothing was acquired.
func requireRWMutexFails(t *testing.T, m *RWMutex, want error) {
	t.Helper()
	requireLockFails(t, "RWMutex", m, want)
	requireLockFails(t, "RWMutex read", readSide{m}, want)
	requireOperatorsFail(t, m.Inspect, m.ForceUnlock, want)
}

// requireSemaphoreFails checks that every method of s reports want.
func requireSemaphoreFails(t *testing.T, s *Semaphore, want error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.TrySetSize(ctx, 1)
	require.ErrorIs(t, err, want, "Semaphore.TrySetSize")
	_, err = s.SetSize(ctx, 1)
	require.ErrorIs(t, err, want, "Semaphore.SetSize")
	_, err = s.AddSize(ctx, 1)
	require.ErrorIs(t, err, want, "Semaphore.AddSize")
	l, err := s.Lock(ctx, 1)
	require.ErrorIs(t, err, want, "Semaphore.Lock")
	require.Nil(t, l)
	l, err = s.TryLock(ctx, 1)
	require.ErrorIs(t, err, want, "Semaphore.TryLock")
	require.Nil(t, l)
	requireFailedLease(t, delivered(t, s.Acquire(ctx, 1)), want)
	_, err = s.Inspect(ctx)
	require.ErrorIs(t, err, want, "Semaphore.Inspect")
	_, err = s.Delete(ctx)
	require.ErrorIs(t, err, want, "Semaphore.Delete")
}

// logBuffer collects log output.
type logBuffer = testenv.LogBuffer

// notPanics runs f and fails the test, without stopping it, if f panics.
func notPanics(t *testing.T, what string, f func()) {
	t.Helper()
	assert.NotPanics(t, f, what)
}

// closedPort returns a loopback address nobody listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// digestCollidingName returns a name with braces but no hash tag that has
// the same digest as itself with ":ch" appended: a pair of names whose
// keys a suffix-based key layout would confuse.
func digestCollidingName() string {
	for i := 0; ; i++ {
		n := "}" + strconv.Itoa(i)
		if slotHash(n+":ch") == slotHash(n) {
			return n
		}
	}
}

// lockWorks locks, inspects, re-enters and unlocks the mutex name of c,
// then checks that its lock key keeps only the fencing counter, and
// expires.
func lockWorks(t *testing.T, b *bi, c, other *Client, name string) {
	t.Helper()
	ctx := b.ctx(t)
	k := c.keysFor(name)
	for _, other := range []string{k.channel, k.queue, k.waiters} {
		require.Equal(t, slotHash(k.lock), slotHash(other), "%q", other)
	}

	m := c.Mutex(name)
	require.Equal(t, name, m.Name())
	l := mustLock(t, ctx, m.Lock)
	require.NoError(t, l.Err())
	require.Equal(t, name, l.Name())
	require.NotZero(t, l.Token())
	st := requireHeld(t, m, l, 1)
	require.Equal(t, c.ID(), st.ClientID())
	require.Greater(t, st.TTL, time.Duration(0))
	require.True(t, b.exists(t, k.lock))

	// Another client sees it held.
	_, err := other.Mutex(name).TryLock(ctx)
	require.ErrorIs(t, err, ErrLocked)
	// The lease's context re-enters it.
	inner, err := m.TryLock(l.Context())
	require.NoError(t, err)
	st, err = m.Inspect(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, st.Holds)
	require.NoError(t, inner.Unlock(ctx))

	require.NoError(t, l.Unlock(ctx))
	require.ErrorIs(t, l.Err(), ErrReleased)
	st, err = m.Inspect(ctx)
	require.NoError(t, err)
	require.False(t, st.Locked)
	owner, err := b.rc.Do(ctx, b.rc.B().Hget().Key(k.lock).Field("owner").Build()).ToString()
	require.NoError(t, err)
	require.Empty(t, owner, "lock key still has an owner after Unlock")
	pttl, err := b.rc.Do(ctx, b.rc.B().Pttl().Key(k.lock).Build()).AsInt64()
	require.NoError(t, err)
	require.Greater(t, pttl, int64(0), "free lock key without TTL")
}

// eachForeignValue runs f, in a subtest for each kind of value the library
// did not write (a string, a hash of other fields): plant sets a key to
// such a value, deleted at the end of the subtest.
func eachForeignValue(t *testing.T, rc rueidis.Client, f func(t *testing.T, kind string, plant func(key string))) {
	for _, v := range []struct {
		kind string
		cmd  func(key string) rueidis.Completed
	}{
		{"string", func(k string) rueidis.Completed { return rc.B().Set().Key(k).Value("x").Build() }},
		{"foreign-hash", func(k string) rueidis.Completed {
			return rc.B().Hset().Key(k).FieldValue().FieldValue("a", "b").Build()
		}},
	} {
		t.Run(v.kind, func(t *testing.T) {
			ctx := context.Background()
			f(t, v.kind, func(key string) {
				t.Helper()
				require.NoError(t, rc.Do(ctx, v.cmd(key)).Error())
				t.Cleanup(func() { rc.Do(ctx, rc.B().Del().Key(key).Build()) })
			})
		})
	}
}

// wrongType plants values of other types at a lock's key and runs check on
// the lock's Mutex; untouched checks that the value is as planted.
func wrongType(t *testing.T, b *bi, check func(t *testing.T, m *Mutex, untouched func(t *testing.T, what string))) {
	// The default prefix: the key of a name without braces is
	// "redisync:{NAME}".
	c := b.e.client(t)
	B := b.rc.B
	for _, kind := range []struct {
		what  string
		plant func(key string) rueidis.Completed
		read  func(key string) rueidis.Completed
		want  string
	}{
		{"string",
			func(k string) rueidis.Completed { return B().Set().Key(k).Value("precious").Build() },
			func(k string) rueidis.Completed { return B().Get().Key(k).Build() }, "precious"},
		{"hash without owner",
			func(k string) rueidis.Completed {
				return B().Hset().Key(k).FieldValue().FieldValue("foo", "bar").Build()
			},
			func(k string) rueidis.Completed { return B().Hgetall().Key(k).Build() }, "map[foo:bar]"},
		{"list",
			func(k string) rueidis.Completed { return B().Rpush().Key(k).Element("a", "b").Build() },
			func(k string) rueidis.Completed { return B().Lrange().Key(k).Start(0).Stop(-1).Build() }, "[a b]"},
		{"set",
			func(k string) rueidis.Completed { return B().Sadd().Key(k).Member("a").Build() },
			func(k string) rueidis.Completed { return B().Smembers().Key(k).Build() }, "[a]"},
		{"zset",
			func(k string) rueidis.Completed { return B().Zadd().Key(k).ScoreMember().ScoreMember(1, "a").Build() },
			func(k string) rueidis.Completed { return B().Zrange().Key(k).Min("0").Max("-1").Build() }, "[a]"},
	} {
		t.Run(kind.what, func(t *testing.T) {
			ctx := context.Background()
			name := "badinput-wrongtype-" + strings.ReplaceAll(kind.what, " ", "-")
			key := "redisync:{" + name + "}"
			require.Equal(t, key, c.keysFor(name).lock)
			require.NoError(t, b.rc.Do(ctx, kind.plant(key)).Error())
			defer b.rc.Do(ctx, B().Del().Key(key).Build())
			untouched := func(t *testing.T, what string) {
				t.Helper()
				res := b.rc.Do(ctx, kind.read(key))
				var got string
				if m, err := res.AsStrMap(); err == nil && kind.what == "hash without owner" {
					got = fmt.Sprint(m)
				} else if s, err := res.AsStrSlice(); err == nil {
					got = fmt.Sprint(s)
				} else {
					got, _ = res.ToString()
				}
				require.Equal(t, kind.want, got, "value changed by %s", what)
				pttl, err := b.rc.Do(ctx, B().Pttl().Key(key).Build()).AsInt64()
				require.NoError(t, err)
				require.Equal(t, int64(-1), pttl, "expiry set by %s", what)
			}
			check(t, c.Mutex(name), untouched)
		})
	}
}

var badInputCases = []biCase{
	{"New nil rueidis client", func(t *testing.T, b *bi) {
		c, err := New(nil)
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.Nil(t, c)
		c, err = New(nil, WithPrefix("fine"), nil)
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.Nil(t, c)
	}},
	{"New bad options", func(t *testing.T, b *bi) {
		for _, o := range []struct {
			what string
			opt  Option
		}{
			{"WithWatchdogLease(0)", WithWatchdogLease(0)},
			{"WithWatchdogLease(-1)", WithWatchdogLease(-1)},
			{"WithWatchdogLease(-1s)", WithWatchdogLease(-time.Second)},
			{"WithFenceRetention(0)", WithFenceRetention(0)},
			{"WithFenceRetention(-1)", WithFenceRetention(-1)},
			{`WithPrefix("")`, WithPrefix("")},
			{`WithPrefix("{")`, WithPrefix("{")},
			{`WithPrefix("}")`, WithPrefix("}")},
			{`WithPrefix("{tag}")`, WithPrefix("{tag}")},
			{`WithPrefix("a{b")`, WithPrefix("a{b")},
			{`WithPrefix("a}b")`, WithPrefix("a}b")},
			{`WithClientName("")`, WithClientName("")},
			{`WithClientName("a b")`, WithClientName("a b")},
			{`WithClientName("a\nb")`, WithClientName("a\nb")},
			{`WithClientName("é")`, WithClientName("é")},
		} {
			c, err := New(b.rc, WithLogger(quietLogger()), o.opt)
			require.ErrorIs(t, err, ErrInvalidArgument, o.what)
			require.Nil(t, c, o.what)
		}
		// A nil Option or a nil logger is ignored.
		c, err := New(b.rc, nil, WithLogger(nil))
		require.NoError(t, err)
		require.NoError(t, c.Close())
	}},
	{"sub-millisecond durations", func(t *testing.T, b *bi) {
		// Leases and retentions go to Redis in milliseconds. A positive
		// duration under one millisecond would be sent as 0 (PEXPIRE 0
		// deletes the key in the very script that took the lock), so it
		// must be rejected rather than yield a lease on nothing.
		ctx := b.ctx(t)
		for _, o := range []struct {
			what string
			opt  Option
		}{
			{"WithWatchdogLease(1ns)", WithWatchdogLease(time.Nanosecond)},
			{"WithWatchdogLease(500µs)", WithWatchdogLease(500 * time.Microsecond)},
			{"WithFenceRetention(1ns)", WithFenceRetention(time.Nanosecond)},
			{"WithFenceRetention(500µs)", WithFenceRetention(500 * time.Microsecond)},
		} {
			c, err := New(b.rc, WithLogger(quietLogger()), WithPrefix(b.prefix), o.opt)
			if assert.ErrorIs(t, err, ErrInvalidArgument, o.what) {
				continue
			}
			m := c.Mutex(t.Name())
			l, err := m.Lock(ctx)
			if err == nil {
				st, ierr := m.Inspect(ctx)
				require.NoError(t, ierr)
				t.Errorf("%s: accepted; Lock returned a lease, Inspect right after: Locked=%v, lease Err=%v",
					o.what, st.Locked, l.Err())
				_ = l.Unlock(ctx)
			}
			require.NoError(t, c.Close())
		}
		c, other := b.client(t), b.client(t)
		for _, d := range []time.Duration{time.Nanosecond, 500 * time.Microsecond} {
			m := c.Mutex(t.Name(), WithFixedLease(d))
			l, err := m.Lock(ctx)
			if !assert.ErrorIs(t, err, ErrInvalidArgument, "WithFixedLease(%v)", d) && err == nil {
				st, ierr := m.Inspect(ctx)
				require.NoError(t, ierr)
				first := l.Err()
				l2, err2 := other.Mutex(t.Name(), WithFixedLease(time.Minute)).TryLock(ctx)
				t.Errorf("WithFixedLease(%v): Lock returned a lease (Err %v), Inspect right after: Locked=%v; another Client's TryLock: %v",
					d, first, st.Locked, err2)
				_ = l.Unlock(ctx)
				if err2 == nil {
					require.NoError(t, l2.Unlock(ctx))
				}
			}
		}
	}},
	{"Dial unreachable", func(t *testing.T, b *bi) {
		addr := closedPort(t)
		c, err := Dial(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true}, WithLogger(quietLogger()))
		require.Error(t, err)
		require.Nil(t, c)
		c, err = Dial(rueidis.ClientOption{})
		require.Error(t, err)
		require.Nil(t, c)
		// A bad option is reported without connecting (the leak check of
		// TestMain would see a connection left open).
		c, err = Dial(rueidis.ClientOption{InitAddress: b.e.addrs, DisableCache: true}, WithPrefix(""))
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.Nil(t, c)
		c, err = Dial(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true}, WithClientName("a b"))
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.Nil(t, c)
	}},
	{"empty name", func(t *testing.T, b *bi) {
		c := b.client(t)
		m := c.Mutex("")
		require.Equal(t, "", m.Name())
		requireAllFail(t, m, ErrInvalidArgument)
		requireAllFail(t, c.Mutex("", WithFixedLease(time.Second), nil), ErrInvalidArgument)
	}},
	{"WithFixedLease not positive", func(t *testing.T, b *bi) {
		c := b.client(t)
		requireAllFail(t, c.Mutex(t.Name(), WithFixedLease(0)), ErrInvalidArgument)
		requireAllFail(t, c.Mutex(t.Name(), WithFixedLease(-time.Second)), ErrInvalidArgument)
		requireAllFail(t, c.Mutex(t.Name(), WithFixedLease(-1)), ErrInvalidArgument)
		// A nil LockOption is ignored.
		lockWorks(t, b, c, b.client(t), t.Name())
	}},
	{"WithRenewedLease not positive, or with WithFixedLease", func(t *testing.T, b *bi) {
		ctx := b.ctx(t)
		c := b.client(t)
		name := t.Name()
		for _, opts := range [][]LockOption{
			{WithRenewedLease(0)}, {WithRenewedLease(-time.Second)}, {WithRenewedLease(time.Microsecond)},
			{WithRenewedLease(time.Minute), WithFixedLease(time.Minute)},
			{WithFixedLease(time.Minute), WithRenewedLease(time.Minute)},
		} {
			requireAllFail(t, c.Mutex(name, opts...), ErrInvalidArgument)
			requireLockFails(t, "FairMutex", c.FairMutex(name, opts...), ErrInvalidArgument)
			requireRWMutexFails(t, c.RWMutex(name, opts...), ErrInvalidArgument)
			requireSemaphoreFails(t, c.Semaphore(name, opts...), ErrInvalidArgument)
			requireLockFails(t, "Quorum", NewQuorum(name, []*Client{c}, opts...), ErrInvalidArgument)
			_, err := NewGroup(c.Mutex(name, opts...)).TryLock(ctx)
			require.ErrorIs(t, err, ErrInvalidArgument)
		}
		lockWorks(t, b, c, b.client(t), name)
	}},
	{"options a lock does not use", func(t *testing.T, b *bi) {
		// WithWaiterExpiry is for the queues of Mutex and FairMutex: every
		// other lock that takes options reports it from every method.
		ctx := b.ctx(t)
		c := b.client(t)
		name := t.Name()
		for _, opts := range [][]LockOption{
			{WithWaiterExpiry(time.Minute)},
			{WithFixedLease(time.Minute), WithWaiterExpiry(time.Minute)},
		} {
			_, err := c.Semaphore(name, opts...).TryLock(ctx, 1)
			require.ErrorContains(t, err, "WithWaiterExpiry does not apply to a Semaphore")
			requireSemaphoreFails(t, c.Semaphore(name, opts...), ErrInvalidArgument)
			_, err = c.RWMutex(name, opts...).TryLock(ctx)
			require.ErrorContains(t, err, "WithWaiterExpiry does not apply to a RWMutex")
			requireRWMutexFails(t, c.RWMutex(name, opts...), ErrInvalidArgument)
			_, err = NewQuorum(name, []*Client{c}, opts...).TryLock(ctx)
			require.ErrorContains(t, err, "WithWaiterExpiry does not apply to a Quorum")
			requireLockFails(t, "Quorum", NewQuorum(name, []*Client{c}, opts...), ErrInvalidArgument)
		}
		// The options they use work.
		s := c.Semaphore(name, WithFixedLease(time.Minute))
		_, err := s.SetSize(ctx, 1)
		require.NoError(t, err)
		l, err := s.TryLock(ctx, 1)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
		_, err = s.Delete(ctx)
		require.NoError(t, err)
		for _, m := range []exclusiveLock{
			c.RWMutex(name, WithFixedLease(time.Minute)), NewQuorum(name, []*Client{c}, WithFixedLease(time.Minute)),
			c.Mutex(name, WithWaiterExpiry(time.Minute)), c.FairMutex(name, WithWaiterExpiry(time.Minute)),
		} {
			l, err = m.TryLock(ctx)
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))
		}
	}},
	{"nil context", func(t *testing.T, b *bi) {
		var nilCtx context.Context
		c := b.client(t)
		m := c.Mutex(t.Name())
		l, err := m.Lock(nilCtx) //nolint:staticcheck // a nil context on purpose
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.Nil(t, l)
		l, err = m.TryLock(nilCtx) //nolint:staticcheck
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.Nil(t, l)
		_, err = m.Inspect(nilCtx) //nolint:staticcheck
		require.ErrorIs(t, err, ErrInvalidArgument)
		_, err = m.ForceUnlock(nilCtx) //nolint:staticcheck
		require.ErrorIs(t, err, ErrInvalidArgument)
		requireFailedLease(t, delivered(t, m.Acquire(nilCtx)), ErrInvalidArgument) //nolint:staticcheck

		ctx := b.ctx(t)
		l, err = m.Lock(ctx)
		require.NoError(t, err)
		require.ErrorIs(t, l.Unlock(nilCtx), ErrInvalidArgument) //nolint:staticcheck
		require.NoError(t, l.Err(), "a rejected Unlock released the lease")
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.True(t, st.Locked)
		require.NoError(t, l.Unlock(ctx))
	}},
	{"canceled context", func(t *testing.T, b *bi) {
		c := b.client(t)
		m := c.Mutex(t.Name())
		done, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := m.Lock(done)
		require.ErrorIs(t, err, context.Canceled)
		_, err = m.TryLock(done)
		require.ErrorIs(t, err, context.Canceled)
		_, err = m.Inspect(done)
		require.ErrorIs(t, err, context.Canceled)
		_, err = m.ForceUnlock(done)
		require.ErrorIs(t, err, context.Canceled)
		requireFailedLease(t, delivered(t, m.Acquire(done)), context.Canceled)
		st, err := m.Inspect(b.ctx(t))
		require.NoError(t, err)
		require.False(t, st.Locked, "an acquisition with an ended context left the lock held")

		// Unlock with an ended context fails and can be retried.
		ctx := b.ctx(t)
		l := mustLock(t, ctx, m.Lock)
		err = l.Unlock(done)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrNotHeld)
		require.NoError(t, l.Err())
		require.NoError(t, l.Unlock(ctx))
	}},
	{"nil Mutex", func(t *testing.T, b *bi) {
		var m *Mutex
		requireAllFail(t, m, ErrInvalidArgument)
		requireAllFail(t, new(Mutex), ErrInvalidArgument)
		notPanics(t, "Name of a nil Mutex", func() { assert.Equal(t, "", m.Name()) })
		lk := m.Locker()
		lk.Lock()
		require.ErrorIs(t, lk.Err(), ErrInvalidArgument)
		require.Nil(t, lk.Lease())
		lk.Unlock()
		var zero Locker
		zero.Lock()
		require.ErrorIs(t, zero.Err(), ErrInvalidArgument)
		zero.Unlock()
	}},
	{"nil Client", func(t *testing.T, b *bi) {
		// Mutex.check reports a Mutex without a Client; making one from a
		// nil Client must get that far.
		var c *Client
		notPanics(t, "Mutex of a nil Client", func() {
			requireAllFail(t, c.Mutex(t.Name()), ErrInvalidArgument)
		})
	}},
	{"zero Client", func(t *testing.T, b *bi) {
		// A Client not made by New or Dial has no connection: everything
		// made from it reports ErrInvalidArgument, nothing panics.
		for _, c := range []*Client{{}, new(Client)} {
			notPanics(t, "zero Client", func() {
				ctx := b.ctx(t)
				name := t.Name()
				require.Empty(t, c.ID())
				requireAllFail(t, c.Mutex(name), ErrInvalidArgument)
				lk := c.Mutex(name).Locker()
				lk.Lock()
				require.ErrorIs(t, lk.Err(), ErrInvalidArgument)
				lk.Unlock()
				fm := c.FairMutex(name)
				requireLockFails(t, "FairMutex", fm, ErrInvalidArgument)
				_, err := fm.Inspect(ctx)
				require.ErrorIs(t, err, ErrInvalidArgument, "FairMutex.Inspect")
				_, err = fm.ForceUnlock(ctx)
				require.ErrorIs(t, err, ErrInvalidArgument, "FairMutex.ForceUnlock")
				requireRWMutexFails(t, c.RWMutex(name), ErrInvalidArgument)
				requireSemaphoreFails(t, c.Semaphore(name), ErrInvalidArgument)

				l := c.Latch(name)
				_, err = l.TrySetCount(ctx, 1)
				require.ErrorIs(t, err, ErrInvalidArgument, "Latch.TrySetCount")
				_, err = l.Reset(ctx, 1)
				require.ErrorIs(t, err, ErrInvalidArgument, "Latch.Reset")
				_, err = l.CountDown(ctx)
				require.ErrorIs(t, err, ErrInvalidArgument, "Latch.CountDown")
				_, err = l.Count(ctx)
				require.ErrorIs(t, err, ErrInvalidArgument, "Latch.Count")
				require.ErrorIs(t, l.Wait(ctx), ErrInvalidArgument, "Latch.Wait")
				require.NotNil(t, l.Done(ctx))

				requireLockFails(t, "Group", NewGroup(c.Mutex(name)), ErrInvalidArgument)
				requireLockFails(t, "Quorum", NewQuorum(name, []*Client{c}), ErrInvalidArgument)
				require.ErrorIs(t, c.Close(), ErrInvalidArgument)
			})
		}
	}},
	{"nil Lease", func(t *testing.T, b *bi) {
		var nilCtx context.Context
		var l *Lease
		require.ErrorIs(t, l.Unlock(context.Background()), ErrNotHeld)
		require.ErrorIs(t, l.Unlock(nilCtx), ErrNotHeld) //nolint:staticcheck
		requireHoldsNothing(t, l, ErrNotHeld)
	}},
	{"Unlock twice", func(t *testing.T, b *bi) {
		c := b.client(t)
		ctx := b.ctx(t)
		l := mustLock(t, ctx, c.Mutex(t.Name()).Lock)
		require.NoError(t, l.Unlock(ctx))
		err := l.Unlock(ctx)
		require.ErrorIs(t, err, ErrNotHeld)
		require.ErrorIs(t, err, ErrReleased)
		require.ErrorIs(t, l.Err(), ErrReleased)
		select {
		case <-l.Lost():
			t.Fatal("Lost() closed by Unlock")
		default:
		}
	}},
	{"Unlock after ForceUnlock", func(t *testing.T, b *bi) {
		ctx := b.ctx(t)
		c := b.client(t, WithWatchdogLease(600*time.Millisecond))
		m := c.Mutex(t.Name())
		l := mustLock(t, ctx, m.Lock)
		ok, err := b.client(t).Mutex(t.Name()).ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		requireLost(t, l, 5*time.Second, ErrExpired)
		err = l.Unlock(ctx)
		require.ErrorIs(t, err, ErrNotHeld)
		require.ErrorIs(t, err, ErrExpired)
		ok, err = m.ForceUnlock(ctx)
		require.NoError(t, err)
		require.False(t, ok)

		// Unlock before the watchdog noticed the loss.
		c = b.client(t)
		m = c.Mutex(t.Name())
		l, err = m.Lock(ctx)
		require.NoError(t, err)
		ok, err = m.ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		err = l.Unlock(ctx)
		require.ErrorIs(t, err, ErrNotHeld)
		require.ErrorIs(t, err, ErrExpired)
		select {
		case <-l.Lost():
		default:
			t.Fatal("Lost() not closed by an Unlock that found the lock gone")
		}
		require.ErrorIs(t, l.Err(), ErrExpired)
	}},
	{"wrong type", func(t *testing.T, b *bi) {
		wrongType(t, b, func(t *testing.T, m *Mutex, untouched func(t *testing.T, what string)) {
			ctx := b.ctx(t)
			_, err := m.Lock(ctx)
			require.ErrorIs(t, err, ErrWrongType, "Lock")
			untouched(t, "Lock")
			_, err = m.TryLock(ctx)
			require.ErrorIs(t, err, ErrWrongType, "TryLock")
			untouched(t, "TryLock")
			_, err = m.Inspect(ctx)
			require.ErrorIs(t, err, ErrWrongType, "Inspect")
			untouched(t, "Inspect")
			requireFailedLease(t, delivered(t, m.Acquire(ctx)), ErrWrongType)
			untouched(t, "Acquire")
		})
	}},
	{"wrong type ForceUnlock", func(t *testing.T, b *bi) {
		// ForceUnlock deletes locks, not values the library did not write:
		// it reports the wrong type as the other methods do.
		wrongType(t, b, func(t *testing.T, m *Mutex, untouched func(t *testing.T, what string)) {
			ok, err := m.ForceUnlock(b.ctx(t))
			assert.ErrorIs(t, err, ErrWrongType)
			assert.False(t, ok)
			untouched(t, "ForceUnlock")
		})
	}},
	{"odd names", func(t *testing.T, b *bi) {
		c, other := b.client(t), b.client(t)
		for i, name := range badInputNames() {
			t.Run(strconv.Itoa(i), func(t *testing.T) { lockWorks(t, b, c, other, name) })
		}
	}},
	{"names whose keys could collide", func(t *testing.T, b *bi) {
		// Each pair: a name, and that name with ":ch" appended, whose lock
		// key a suffix-based layout could take for the first one's channel.
		// Two names are two locks: each locks and unlocks on its own, held
		// at once.
		c := b.client(t)
		digest := digestCollidingName()
		for _, pair := range [][2]string{
			{"{user:7}:cart", "{user:7}:cart:ch"},
			{"{user:7}:cart:ch", "{user:7}:cart"},
			{digest, digest + ":ch"},
			{digest + ":ch", digest},
		} {
			t.Run(fmt.Sprintf("%q then %q", pair[0], pair[1]), func(t *testing.T) {
				ctx := b.ctx(t)
				ma, mb := c.Mutex(pair[0]), c.Mutex(pair[1])
				ka, kb := c.keysFor(pair[0]), c.keysFor(pair[1])
				t.Cleanup(func() {
					// Leave nothing for the next pair, whatever happened.
					for _, k := range []string{ka.lock, kb.lock} {
						b.rc.Do(context.Background(), b.rc.B().Del().Key(k).Build())
					}
				})
				for _, k := range []string{ka.channel, ka.queue, ka.waiters} {
					assert.NotEqual(t, k, kb.lock, "the lock key of %q is a key of %q", pair[1], pair[0])
				}
				for _, k := range []string{kb.channel, kb.queue, kb.waiters} {
					assert.NotEqual(t, k, ka.lock, "the lock key of %q is a key of %q", pair[0], pair[1])
				}
				la := mustLock(t, ctx, ma.TryLock)
				lb, err := mb.TryLock(ctx)
				if !assert.NoError(t, err, "TryLock %q while %q is held", pair[1], pair[0]) {
					require.NoError(t, la.Unlock(ctx))
					return
				}
				for _, m := range []*Mutex{ma, mb} {
					st, err := m.Inspect(ctx)
					require.NoError(t, err)
					assert.True(t, st.Locked, "%q", m.Name())
					assert.Equal(t, 1, st.Holds, "%q", m.Name())
					assert.Greater(t, st.TTL, time.Duration(0))
					assert.LessOrEqual(t, st.TTL, 30*time.Second, "%q: lease longer than the watchdog lease", m.Name())
				}
				require.NoError(t, la.Unlock(ctx))
				require.NoError(t, lb.Unlock(ctx))
				for _, m := range []*Mutex{ma, mb} {
					st, err := m.Inspect(ctx)
					require.NoError(t, err)
					assert.False(t, st.Locked, "%q still locked after every lease was unlocked: %+v", m.Name(), st)
				}
			})
		}
	}},
	{"closed Client", func(t *testing.T, b *bi) {
		ctx := b.ctx(t)
		c := b.client(t)
		m := c.Mutex(t.Name())
		held := mustLock(t, ctx, m.Lock)
		require.NoError(t, c.Close())
		require.NoError(t, c.Close())
		requireAllFail(t, m, ErrClosed)
		requireAllFail(t, c.Mutex(t.Name()+"/after"), ErrClosed)
		// An invalid name is still reported as such.
		requireAllFail(t, c.Mutex(""), ErrInvalidArgument)
		<-held.Lost()
		require.ErrorIs(t, held.Err(), ErrClosed)
		err := held.Unlock(ctx)
		require.ErrorIs(t, err, ErrNotHeld)
		require.ErrorIs(t, err, ErrClosed)
		lk := m.Locker()
		lk.Lock()
		require.ErrorIs(t, lk.Err(), ErrClosed)
		require.Nil(t, lk.Lease())
		lk.Unlock()
	}},
	{"Locker", func(t *testing.T, b *bi) {
		ctx := b.ctx(t)
		logs := &logBuffer{}
		c := b.client(t, WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
		m := c.Mutex(t.Name())
		lk := m.Locker()
		lk.Lock()
		require.NoError(t, lk.Err())
		require.NotNil(t, lk.Lease())
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.True(t, st.Locked)
		lk.Unlock()
		require.Nil(t, lk.Lease())
		st, err = m.Inspect(ctx)
		require.NoError(t, err)
		require.False(t, st.Locked)
		require.NotContains(t, logs.String(), "Locker.Unlock")

		// Unlock without Lock logs and does not panic.
		notPanics(t, "Unlock of a Locker that holds nothing", m.Locker().Unlock)
		notPanics(t, "second Unlock", lk.Unlock)
		require.Contains(t, logs.String(), "Locker.Unlock")

		// An empty name: Lock returns at once without the lock.
		bad := c.Mutex("").Locker()
		returned := make(chan struct{})
		go func() { bad.Lock(); close(returned) }()
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Fatal("Locker.Lock of an empty name did not return")
		}
		require.ErrorIs(t, bad.Err(), ErrInvalidArgument)
		require.Nil(t, bad.Lease())
		notPanics(t, "Unlock after a failed Lock", bad.Unlock)

		// A later successful Lock clears Err.
		lk.Lock()
		require.NoError(t, lk.Err())
		lk.Unlock()
	}},
}

func TestBadInput(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		rc := e.rueidisClient(t)
		for i, tc := range badInputCases {
			t.Run(tc.name, func(t *testing.T) {
				b := &bi{e: e, rc: rc, prefix: fmt.Sprintf("badinput%d", i)}
				before := b.allKeys(t)
				// Checked before the case's Clients are closed: Close would
				// release what a case leaked.
				defer func() {
					if !t.Failed() {
						b.requireNoState(t, before)
					}
				}()
				tc.run(t, b)
			})
		}
	})
}

func FuzzLockName(f *testing.F) {
	f.Add("")
	for _, n := range badInputNames() {
		f.Add(n)
	}
	f.Add("orders:42")
	e := standaloneEnv(f)
	c := e.client(f, WithPrefix("fuzz"), WithFenceRetention(time.Minute))
	rc := e.rueidisClient(f)
	f.Fuzz(func(t *testing.T, name string) {
		ctx := withTimeout(t, 10*time.Second)
		m := c.Mutex(name)
		if name == "" {
			_, err := m.TryLock(ctx)
			require.ErrorIs(t, err, ErrInvalidArgument)
			_, err = m.Inspect(ctx)
			require.ErrorIs(t, err, ErrInvalidArgument)
			return
		}
		k := c.keysFor(name)
		slot := slotHash(k.lock)
		for _, other := range []string{k.channel, k.queue, k.waiters} {
			require.Equal(t, slot, slotHash(other), "key %q of %q in another slot", other, name)
		}

		l := mustLock(t, ctx, m.TryLock)
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.True(t, st.Locked)
		require.Equal(t, 1, st.Holds)
		require.Equal(t, l.Token(), st.Token)
		require.NoError(t, l.Unlock(ctx))
		owner, err := rc.Do(ctx, rc.B().Hget().Key(k.lock).Field("owner").Build()).ToString()
		require.NoError(t, err)
		require.Empty(t, owner, "lock key of %q still has an owner after Unlock", name)
	})
}
