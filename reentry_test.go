package redisync

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A Group taken one lock at a time (its locks on two Clients) with the
// Context of a Mutex lease that was passed on locally re-enters that lock
// with the lease's own token: the group's token is above every earlier
// holder's, the goroutine that passed the lock on included.
func TestGroupInOrderReentersPassedOnLeaseWithItsToken(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c1, c2 := e.client(t), e.client(t)
		// The other lock's counter is behind: its next token comes before
		// the passed-on lock's tokens, which makes the re-entered lock's
		// token the group's.
		other := c2.Mutex(t.Name() + ":b")
		warm(t, ctx, other)
		m := c1.Mutex(t.Name()+":a", WithLocalPasses(DefaultLocalPasses, time.Minute))
		warm(t, ctx, m)
		first := mustLock(t, ctx, m.Lock)
		_, leases, _ := holdAndQueueFrom(t, ctx, m, first, 1)
		firstToken := first.Token()
		require.NoError(t, first.Unlock(ctx))
		passed := <-leases
		require.NoError(t, passed.Err())
		require.Same(t, first.h, passed.h, "the lock was not passed on locally")
		require.Greater(t, passed.Token(), firstToken)

		g := NewGroup(m, other)
		require.False(t, g.atomic)
		gl := mustLock(t, passed.Context(), g.Lock)
		require.Greater(t, gl.Token(), firstToken, "the group's token must be above the holder that passed the lock on")
		require.GreaterOrEqual(t, gl.Token(), passed.Token())
		require.NoError(t, gl.Unlock(ctx))
		require.NoError(t, passed.Unlock(ctx))

		// Every later ownership of either name comes after the group.
		for _, mu := range []*Mutex{e.client(t).Mutex(m.name), e.client(t).Mutex(other.name)} {
			l := mustLock(t, ctx, mu.Lock)
			require.Greater(t, l.Token(), gl.Token())
			require.NoError(t, l.Unlock(ctx))
		}
	})
}
