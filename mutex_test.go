package redisync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMutexLockUnlock(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		m := c.Mutex(t.Name())
		l, err := m.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, l.Err())
		require.NotZero(t, l.Token())
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.True(t, st.Locked)
		require.Equal(t, 1, st.Holds)
		require.Equal(t, c.ID(), st.ClientID())
		require.Equal(t, l.Token(), st.Token)
		require.Greater(t, st.TTL, 20*time.Second)

		_, err = c.Mutex(t.Name()).TryLock(ctx)
		require.ErrorIs(t, err, ErrLocked)

		require.NoError(t, l.Unlock(ctx))
		require.ErrorIs(t, l.Err(), ErrReleased)
		require.ErrorIs(t, context.Cause(l.Context()), ErrReleased)
		require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
		st, err = m.Inspect(ctx)
		require.NoError(t, err)
		require.False(t, st.Locked)

		l2, err := m.TryLock(ctx)
		require.NoError(t, err)
		require.Greater(t, l2.Token(), l.Token())
		require.NoError(t, l2.Unlock(ctx))
	})
}

func TestMutexHandOff(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		a, b := e.client(t), e.client(t)
		l, err := a.Mutex(t.Name()).Lock(ctx)
		require.NoError(t, err)
		got := b.Mutex(t.Name()).Acquire(ctx)
		time.Sleep(50 * time.Millisecond)
		select {
		case <-got:
			t.Fatal("acquired a held lock")
		default:
		}
		start := time.Now()
		require.NoError(t, l.Unlock(ctx))
		l2 := <-got
		require.NoError(t, l2.Err())
		require.Less(t, time.Since(start), 5*time.Second, "woken by the release, not the lease")
		require.Greater(t, l2.Token(), l.Token())
		require.NoError(t, l2.Unlock(ctx))
		eventually(t, 5*time.Second, func() bool { return len(e.channels(t)) == 0 }, "subscriptions left: %v", e.channels(t))
	})
}

func TestMutexLostOnDelete(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t, WithWatchdogLease(600*time.Millisecond))
		m := c.Mutex(t.Name())
		l, err := m.Lock(ctx)
		require.NoError(t, err)
		ok, err := m.ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		select {
		case <-l.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("Lost not closed")
		}
		require.ErrorIs(t, l.Err(), ErrExpired)
		require.ErrorIs(t, context.Cause(l.Context()), ErrExpired)
		require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
	})
}

func TestMutexReentrant(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		m := c.Mutex(t.Name())
		l1, err := m.Lock(ctx)
		require.NoError(t, err)
		l2, err := m.Lock(l1.Context())
		require.NoError(t, err)
		require.Equal(t, l1.Token(), l2.Token())
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, st.Holds)
		require.NoError(t, l2.Unlock(ctx))
		st, _ = m.Inspect(ctx)
		require.True(t, st.Locked)
		require.Equal(t, 1, st.Holds)
		require.NoError(t, l1.Unlock(ctx))
		st, _ = m.Inspect(ctx)
		require.False(t, st.Locked)
		_ = errors.New
	})
}
