package redisync

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFencedSet(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c, rc := e.client(t), e.rueidisClient(t)
		key := "resource:" + t.Name()
		value := func() string {
			t.Helper()
			v, err := rc.Do(ctx, rc.B().Hget().Key(key).Field("value").Build()).ToString()
			require.NoError(t, err)
			return v
		}
		m := c.Mutex(t.Name())
		old := mustLock(t, ctx, m.Lock)
		require.NoError(t, c.FencedSet(ctx, key, "old", old.Token()))
		require.NoError(t, old.Unlock(ctx))
		l := mustLock(t, ctx, m.Lock)
		defer l.Unlock(ctx)

		require.NoError(t, c.FencedSet(ctx, key, "new", l.Token()))
		require.NoError(t, c.FencedSet(ctx, key, "newer", l.Token()), "the same token writes again")
		err := c.FencedSet(ctx, key, "late", old.Token())
		require.ErrorIs(t, err, ErrStaleToken)
		require.Equal(t, "newer", value())

		// Tokens compare as numbers, not as strings.
		require.NoError(t, c.FencedSet(ctx, key+"/n", "9", 9))
		require.NoError(t, c.FencedSet(ctx, key+"/n", "10", 10))
		require.ErrorIs(t, c.FencedSet(ctx, key+"/n", "9", 9), ErrStaleToken)
	})
}

func TestFencedSetRejectsBadInput(t *testing.T) {
	e := standaloneEnv(t)
	ctx := context.Background()
	c, rc := e.client(t), e.rueidisClient(t)
	require.NoError(t, rc.Do(ctx, rc.B().Set().Key("fenced:string").Value("x").Build()).Error())
	require.ErrorIs(t, c.FencedSet(ctx, "fenced:string", "v", 1), ErrWrongType)

	require.ErrorIs(t, c.FencedSet(ctx, "fenced:bad", "v", 0), ErrInvalidArgument)
	require.ErrorIs(t, c.FencedSet(ctx, "", "v", 1), ErrInvalidArgument)
	var nilCtx context.Context
	require.ErrorIs(t, c.FencedSet(nilCtx, "fenced:bad", "v", 1), ErrInvalidArgument) //nolint:staticcheck // a nil context on purpose
	require.ErrorIs(t, (*Client)(nil).FencedSet(ctx, "fenced:bad", "v", 1), ErrInvalidArgument)
	n, err := rc.Do(ctx, rc.B().Exists().Key("fenced:bad").Build()).AsInt64()
	require.NoError(t, err)
	require.Zero(t, n, "nothing written")

	require.NoError(t, c.Close())
	require.ErrorIs(t, c.FencedSet(ctx, "fenced:bad", "v", 1), ErrClosed)
}
