package redisync

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A re-entry claims its parent's ownership as Redis has it: the parent's
// owner id and its token. A lock that Redis shows held under the parent's
// owner id with another token is another ownership, and the re-entry is
// refused with the parent's loss, for a Mutex, a FairMutex and a Group that
// re-enters a Mutex lease.
//
// The API never grants an owner id twice (owner ids are fresh for every
// acquisition, and a re-entry never takes a free lock), so no schedule of
// calls reaches that state: the test writes it in Redis.
func TestReentryRefusedWhenTheOwnersTokenMoved(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c := e.renewalClient(t)
		rc := e.rueidisClient(t)
		for _, kind := range []string{"Mutex", "FairMutex", "Group"} {
			t.Run(kind, func(t *testing.T) {
				name := "{" + t.Name() + "}"
				var lock, reenter func(context.Context) (*Lease, error)
				var force func(context.Context) (bool, error)
				if kind == "FairMutex" {
					m := c.FairMutex(name)
					lock, reenter, force = m.Lock, m.TryLock, m.ForceUnlock
				} else {
					m := c.Mutex(name)
					lock, reenter, force = m.Lock, m.TryLock, m.ForceUnlock
					if kind == "Group" {
						g := NewGroup(m, c.Mutex(name+":b"))
						require.True(t, g.atomic)
						reenter = g.TryLock
					}
				}
				parent := mustLock(t, ctx, lock)
				moved := strconv.FormatUint(parent.Token()+7, 10)
				require.NoError(t, rc.Do(ctx, rc.B().Hset().Key(parent.h.keys.lock).FieldValue().
					FieldValue("token", moved).FieldValue("t", moved).Build()).Error())

				l, err := reenter(parent.Context())
				require.Nil(t, l, "a re-entry joined an ownership with another token")
				require.ErrorIs(t, err, ErrNotHeld)
				require.ErrorIs(t, err, ErrTakenOver)
				require.ErrorIs(t, parent.Err(), ErrTakenOver, "the parent's loss is reported")
				if kind == "Group" {
					st, err := c.Mutex(name + ":b").Inspect(ctx)
					require.NoError(t, err)
					require.False(t, st.Locked, "the refused group took its other lock")
				}
				_, err = force(ctx)
				require.NoError(t, err)
			})
		}
	})
}
