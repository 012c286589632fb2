package redisync

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A Group lost (one of its locks' fixed lease ran out) releases what it
// still holds at once; its Unlock afterwards returns ErrNotHeld with the
// loss, not nil: nil would say the group held its locks until then, while
// another owner may have taken them since.
func TestGroupUnlockAfterItsLossReportsTheLoss(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c := e.client(t)
		name := "{" + t.Name() + "}"
		lease := WithFixedLease(300 * time.Millisecond)
		g := NewGroup(c.Mutex(name+":a", lease), c.Mutex(name+":b", lease))
		gl := mustLock(t, ctx, g.Lock)
		select {
		case <-gl.Lost():
		case <-time.After(10 * time.Second):
			t.Fatal("the group's fixed lease ran out unreported")
		}
		require.ErrorIs(t, gl.Err(), ErrExpired)
		ol := mustLock(t, ctx, e.client(t).Mutex(name+":a").Lock)
		err := gl.Unlock(ctx)
		require.ErrorIs(t, err, ErrNotHeld)
		require.ErrorIs(t, err, ErrExpired)
		require.ErrorIs(t, gl.Unlock(ctx), ErrNotHeld, "a retry")
		require.NoError(t, ol.Unlock(ctx), "the group's Unlock released another owner's lock")
	})
}
