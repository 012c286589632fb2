package redisync

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

func TestNewRejectsBadInput(t *testing.T) {
	e := standaloneEnv(t)
	rc := e.rueidisClient(t)
	_, err := New(nil)
	require.ErrorIs(t, err, ErrInvalidArgument)
	for _, opt := range []Option{
		WithWatchdogLease(0),
		WithWatchdogLease(-time.Second),
		WithFenceRetention(0),
		WithPrefix(""),
		WithPrefix("a{b"),
		WithPrefix("a}b"),
	} {
		_, err := New(rc, opt)
		require.ErrorIs(t, err, ErrInvalidArgument)
	}
	c, err := New(rc, nil) // a nil option is ignored
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

func TestKeysShareOneSlot(t *testing.T) {
	e := standaloneEnv(t)
	c := e.client(t)
	names := []string{
		"orders:42", "{user:7}:cart", "}", "{", "{}", "}{", "a}b{c", "x{}y{z}",
		"with space", "\x00\xff binary", strings.Repeat("long", 10000),
	}
	seen := map[string]string{}
	for _, n := range names {
		k := c.keysFor(n)
		s := slotHash(k.lock)
		for _, other := range []string{k.channel, k.queue, k.waiters} {
			require.Equal(t, s, slotHash(other), "name %q, key %q", n, other)
		}
		require.True(t, strings.HasPrefix(k.lock, "redisync:"))
		prev, dup := seen[k.lock]
		require.False(t, dup, "%q and %q share a key", n, prev)
		seen[k.lock] = n
	}
	// The names are those key gives each kind.
	for _, n := range names {
		require.Equal(t, lockKeys{lock: "redisync:" + tagged(n), channel: c.key("ch", n), queue: c.key("q", n), waiters: c.key("w", n)}, c.keysFor(n), "name %q", n)
		require.Equal(t, lockKeys{lock: c.key("fair", n), channel: c.key("fairch", n), queue: c.key("fairq", n), waiters: c.key("fairw", n)}, c.fairKeysFor(n), "name %q", n)
	}
	// A name's own hash tag decides its slot.
	require.Equal(t, slotHash("{user:7}"), slotHash(c.keysFor("{user:7}:cart").lock))
	// Names that look alike do not collide.
	require.NotEqual(t, c.keysFor("{x}").lock, c.keysFor("x").lock)
}

func TestSlotHashMatchesRedis(t *testing.T) {
	e := clusterEnv(t)
	for _, k := range []string{"a", "redisync:{orders:42}", "{user1000}.following", "foo{}{bar}", "123456789"} {
		got, err := e.cluster.Masters[0].Do("CLUSTER", "KEYSLOT", k)
		require.NoError(t, err)
		require.Equal(t, got, strconv.Itoa(int(slotHash(k))), "key %q", k)
	}
}

func TestCloseLosesAndReleasesLeases(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		a, b := e.client(t), e.client(t)
		l := mustLock(t, ctx, a.Mutex(t.Name()).Lock)
		held, err := b.Mutex(t.Name() + "/other").Lock(ctx)
		require.NoError(t, err)
		defer held.Unlock(ctx)
		waiting := a.Mutex(t.Name() + "/other").Acquire(ctx)
		next := b.Mutex(t.Name()).Acquire(ctx)

		require.NoError(t, a.Close())
		require.NoError(t, a.Close(), "Close is idempotent")
		<-l.Lost()
		require.ErrorIs(t, l.Err(), ErrClosed)
		require.ErrorIs(t, context.Cause(l.Context()), ErrClosed)
		require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)

		// The lock was released at once: b gets it without waiting for the lease.
		nl := recv(t, next, 5*time.Second, "lock not released by Close")
		require.NoError(t, nl.Unlock(ctx))
		// a's waiter ended with ErrClosed.
		require.ErrorIs(t, (<-waiting).Err(), ErrClosed)
		_, err = a.Mutex(t.Name()).Lock(ctx)
		require.ErrorIs(t, err, ErrClosed)
	})
}

// A lease reported lost because no renewal answered before its deadline
// (ErrConnectionLost: here the Client lapsed) may still hold its key: its
// Unlock would free it, and once the Client closes, which ends every
// Unlock, Close does, so that nobody waits for the rest of its lease.
func TestCloseReleasesALeaseLostOnALapse(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c := e.client(t)
		m := c.Mutex(t.Name(), WithRenewedLease(5*time.Second), WithLocalPasses(0, 0))
		other := e.client(t).Mutex(t.Name())
		// A second lease lapses too, and is unlocked before Close.
		unlocked := c.Mutex(t.Name()+"-2", WithRenewedLease(5*time.Second), WithLocalPasses(0, 0))
		l2 := mustLock(t, ctx, unlocked.Lock)
		l := mustLock(t, ctx, m.Lock)
		// A re-entry lapses with it; its Unlock leaves the outer hold in
		// Redis, for Close to release.
		re := mustLock(t, l.Context(), m.Lock)
		d, ok := l.Deadline()
		require.True(t, ok)
		resume := c.stallWatchdog()
		// As a renewal that ran but whose reply never came would, the key
		// gets a lease well past the deadline the Client counts from.
		rc := e.rueidisClient(t)
		require.NoError(t, rc.Do(ctx, rc.B().Pexpire().Key(m.keys.lock).Milliseconds(20000).Build()).Error())
		time.Sleep(time.Until(d) + 20*time.Millisecond)
		resume()
		for _, l := range []*Lease{l, l2} {
			select {
			case <-l.Lost():
			case <-time.After(5 * time.Second):
				t.Fatal("the lapse was not reported")
			}
			require.ErrorIs(t, l.Err(), ErrConnectionLost)
		}
		require.NoError(t, l2.Unlock(ctx), "the Unlock of a lease that lapsed frees its key")
		c.watchdog.mu.Lock()
		_, kept := c.watchdog.lapsed[l2.h]
		c.watchdog.mu.Unlock()
		require.False(t, kept, "Close would release again a lease whose Unlock released it")
		require.NoError(t, re.Unlock(ctx), "the Unlock of a re-entry that lapsed releases its hold")
		c.watchdog.mu.Lock()
		_, kept = c.watchdog.lapsed[l.h]
		c.watchdog.mu.Unlock()
		require.True(t, kept, "a lapsed ownership still held through its outer lease was forgotten")
		st, err := other.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, l.h.owner, st.Owner, "the key no longer held the lease that lapsed: nothing to test")

		require.NoError(t, c.Close())
		st, err = other.Inspect(ctx)
		require.NoError(t, err)
		require.False(t, st.Locked, "Close left the key of a lease that lapsed held, pttl %v", st.TTL)
		require.ErrorIs(t, l.Unlock(ctx), ErrClosed)
	})
}

// TestClientName: a dialed Client names its connections after its id and
// WithClientName, on every node it talks to; its id stays a UUID.
func TestClientName(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		logs := &logBuffer{}
		c := dial(t, e.addrs, WithClientName("billing@host-7/pid-42"), WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
		_, err := uuid.Parse(c.ID())
		require.NoError(t, err, "ID is not a UUID: %q", c.ID())
		l := mustLock(t, ctx, c.Mutex(t.Name()).Lock)
		defer l.Unlock(ctx)

		var servers []string
		for _, m := range e.masters() {
			servers = append(servers, m.Addr)
		}
		want := "name=redisync:" + c.ID() + ":billing@host-7/pid-42 "
		rc := e.rueidisClient(t)
		nodes := rc.Nodes()
		for _, addr := range servers {
			// The node that holds the lock knows the name, and so does
			// every node the Client is connected to.
			list, err := nodes[addr].Do(ctx, rc.B().ClientList().Build()).ToString()
			require.NoError(t, err)
			if strings.Contains(list, "name=redisync:"+c.ID()) {
				require.Contains(t, list, want, addr)
			}
		}
		holder := servers[0]
		if e.cluster != nil {
			m, _ := slotOwner(t, e.cluster, c.keysFor(t.Name()).lock)
			holder = m.Addr
		}
		list, err := nodes[holder].Do(ctx, rc.B().ClientList().Build()).ToString()
		require.NoError(t, err)
		require.Contains(t, list, want, "the node holding the lock")

		// The name labels the log lines too.
		c.Mutex(t.Name()).Locker().Unlock()
		require.Contains(t, logs.String(), "redisync.client_name=billing@host-7/pid-42")
	})
}

// TestClientNameWithNew: a Client made by New with DetectChanges (or
// without) and WithClientName leaves the caller's connections' names alone
// and keeps a connection of its own named after it while it is open, as
// CLIENT LIST shows; it labels its log lines with the name too.
func TestClientNameWithNew(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		logs := &logBuffer{}
		opt := rueidis.ClientOption{InitAddress: e.addrs, ClientName: "callers-own"}
		detect := DetectChanges(&opt)
		rc, err := rueidis.NewClient(opt)
		require.NoError(t, err)
		defer rc.Close()
		c, err := New(rc, detect, WithClientName("svc"), WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
		require.NoError(t, err)
		defer c.Close()
		plain := e.renewalClient(t, WithClientName("plain-svc"))
		c.Mutex(t.Name()).Locker().Unlock()
		require.Contains(t, logs.String(), "redisync.client_name=svc")

		admin := e.rueidisClient(t)
		clientList := func() string {
			var all strings.Builder
			for _, m := range e.masters() {
				list, err := admin.Nodes()[m.Addr].Do(ctx, admin.B().ClientList().Build()).ToString()
				require.NoError(t, err)
				all.WriteString(list)
			}
			return all.String()
		}
		for _, want := range []string{"name=redisync:" + c.ID() + ":svc ", "name=redisync:" + plain.ID() + ":plain-svc "} {
			eventually(t, 5*time.Second, func() bool { return strings.Contains(clientList(), want) }, "no connection named %s", want)
		}
		require.Contains(t, clientList(), "name=callers-own ", "the caller's connections keep their name")

		require.NoError(t, c.Close())
		require.NotContains(t, clientList(), "name=redisync:"+c.ID(), "the name connection goes with Close")
	})
}
