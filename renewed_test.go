package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRenewedLeaseKeepsEachLockOnItsOwnLease: on a Client with the default
// watchdog lease (30s), locks of every kind given WithRenewedLease keep
// their own lease in Redis, shorter or longer than the Client's, and the
// watchdog renews each in time: held for several of the short leases, none
// is lost.
func TestRenewedLeaseKeepsEachLockOnItsOwnLease(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		admin := e.rueidisClient(t)
		const short, long = 1500 * time.Millisecond, 45 * time.Second
		name := t.Name()

		sem := c.Semaphore(name, WithRenewedLease(short))
		_, err := sem.SetSize(ctx, 2)
		require.NoError(t, err)
		t.Cleanup(func() { sem.Delete(context.Background()) })
		rw := c.RWMutex(name+":rw", WithRenewedLease(short))
		rwRead := c.RWMutex(name+":rwr", WithRenewedLease(short))
		g1, g2 := c.Mutex(name+":g1", WithRenewedLease(short)), c.Mutex(name+":g2", WithRenewedLease(short))
		q := NewQuorum(name+":q", []*Client{c}, WithRenewedLease(short))

		type held struct {
			what  string
			l     *Lease
			keys  []string
			lease time.Duration
		}
		var hs []held
		add := func(what string, l *Lease, lease time.Duration, keys ...string) {
			hs = append(hs, held{what, l, keys, lease})
		}
		m := c.Mutex(name+":m", WithRenewedLease(short))
		add("Mutex", mustLock(t, ctx, m.Lock), short, m.keys.lock)
		f := c.FairMutex(name+":f", WithRenewedLease(short))
		add("FairMutex", mustLock(t, ctx, f.Lock), short, f.keys.lock)
		add("RWMutex write", mustLock(t, ctx, rw.Lock), short, rw.keys.lock)
		add("RWMutex read", mustLock(t, ctx, rwRead.RLock), short, rwRead.keys.readers)
		add("Semaphore", mustLock(t, ctx, func(ctx context.Context) (*Lease, error) { return sem.Lock(ctx, 1) }), short, sem.keys.holders)
		add("Group", mustLock(t, ctx, NewGroup(g1, g2).Lock), short, g1.keys.lock, g2.keys.lock)
		add("Quorum", mustLock(t, ctx, q.Lock), short, q.ms[0].keys.lock)
		longer := c.Mutex(name+":long", WithRenewedLease(long))
		add("Mutex, longer than the Client's", mustLock(t, ctx, longer.Lock), long, longer.keys.lock)
		defaulted := c.Mutex(name + ":default")
		add("Mutex, the Client's lease", mustLock(t, ctx, defaulted.Lock), defaultWatchdogLease, defaulted.keys.lock)

		// Over three short leases, each key keeps a TTL of its own lease at
		// most, and above what a shorter lease would leave.
		until := time.Now().Add(3 * short)
		for time.Now().Before(until) {
			for _, h := range hs {
				require.NoError(t, h.l.Err(), h.what)
				for _, k := range h.keys {
					pttl, err := admin.Do(ctx, admin.B().Pttl().Key(k).Build()).AsInt64()
					require.NoError(t, err)
					ttl := time.Duration(pttl) * time.Millisecond
					require.LessOrEqual(t, ttl, h.lease, "%s: key %s", h.what, k)
					require.Greater(t, ttl, time.Duration(0), "%s: key %s gone", h.what, k)
					if h.lease > defaultWatchdogLease {
						require.Greater(t, ttl, defaultWatchdogLease, "%s: key %s is not on its own lease", h.what, k)
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		for _, h := range hs {
			require.NoError(t, h.l.Err(), h.what)
			require.NoError(t, h.l.Unlock(ctx), h.what)
		}
	})
}

// TestRenewedLeaseTakeoverAfterCrash: a holder that stops renewing without
// releasing (a crash; here Detach) keeps a lock with WithRenewedLease(d)
// for about d, not for the Client's lease: a standby waiting in Lock takes
// it over well before the 30s default would let it.
func TestRenewedLeaseTakeoverAfterCrash(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const lease = time.Second
		crashed := e.client(t).Mutex(t.Name(), WithRenewedLease(lease))
		standby := e.client(t).Mutex(t.Name(), WithRenewedLease(lease))
		l := mustLock(t, ctx, crashed.Lock)
		require.NoError(t, l.Detach())
		start := time.Now()
		next := mustLock(t, withTimeout(t, 10*time.Second), standby.Lock)
		took := time.Since(start)
		require.Less(t, took, defaultWatchdogLease/3, "a crash cost the standby the Client's lease")
		t.Logf("taken over %v after the holder stopped renewing a lease of %v", took.Round(time.Millisecond), lease)
		require.NoError(t, next.Unlock(ctx))
	})
}
