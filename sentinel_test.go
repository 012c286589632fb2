package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync/internal/redistest"
)

// Clients behind Sentinel follow a failover: a lock the replica had
// acknowledged (WithReplicaAck) survives it, renewals, subscriptions and
// wake-ups move to the new primary.
func TestSentinelFailover(t *testing.T) {
	s := redistest.NewSentinel(t, 1, 3)
	ctx := withTimeout(t, time.Minute)
	dial := func(opts ...Option) *Client {
		c, err := Dial(rueidis.ClientOption{
			InitAddress:  s.SentinelAddrs(),
			Sentinel:     rueidis.SentinelOption{MasterSet: s.MasterName},
			DisableCache: true,
		}, append([]Option{WithLogger(quietLogger())}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	holder := dial(WithWatchdogLease(3*time.Second), WithReplicaAck(1, time.Second))
	m := holder.Mutex("sentinel")
	l := mustLock(t, ctx, m.Lock)
	waiter := dial()
	next := waiter.Mutex("sentinel").Acquire(ctx)
	time.Sleep(100 * time.Millisecond) // the waiter subscribes

	require.NoError(t, s.Failover())
	select {
	case <-l.Lost():
		t.Fatalf("lock lost in a failover to a replica that had it: %v", l.Err())
	case <-time.After(3 * time.Second): // three renewal periods on the new primary
	}
	st, err := m.Inspect(ctx)
	require.NoError(t, err)
	require.True(t, st.Locked)
	require.Equal(t, l.Token(), st.Token)
	requireLockOwner(t, s.Primary, m.keys.lock, l.h.owner, "the new primary has the lock")
	// The waiter's subscription moved too, though its connection to the
	// old primary, now a replica, may live on.
	eventually(t, 5*time.Second, func() bool {
		channels, err := s.Primary.Do("PUBSUB", "SHARDCHANNELS")
		return err == nil && channels == waiterChannel(m.keys.channel, waiter.id)
	}, "the waiter's subscription is not on the new primary")

	require.NoError(t, l.Unlock(ctx))
	nl := recv(t, next, 10*time.Second, "waiter not woken after the failover")
	require.Greater(t, nl.Token(), l.Token())
	require.NoError(t, nl.Unlock(ctx))
}

// A Client behind Sentinel from Dial learns at once that a held lock was
// deleted on the primary.
func TestSentinelLostSoonAfterDelete(t *testing.T) {
	s := redistest.NewSentinel(t, 1, 1)
	ctx := context.Background()
	c, err := Dial(rueidis.ClientOption{
		InitAddress: s.SentinelAddrs(),
		Sentinel:    rueidis.SentinelOption{MasterSet: s.MasterName},
	}, WithLogger(quietLogger()))
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, DetectOnChange, c.LossDetection())
	m := c.Mutex(t.Name())
	l := mustLock(t, ctx, m.Lock)
	time.Sleep(50 * time.Millisecond) // tracked
	start := time.Now()
	_, err = s.Primary.Do("DEL", m.keys.lock)
	require.NoError(t, err)
	select {
	case <-l.Lost():
		t.Logf("lost %v after the DEL", time.Since(start))
	case <-time.After(2 * time.Second):
		t.Fatal("Lost not closed 2s after the DEL")
	}
	require.ErrorIs(t, l.Err(), ErrExpired)
}
