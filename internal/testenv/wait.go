package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// WaitCase is one wait of a test: what it waits for (Name, which its error
// must name), the error a single attempt gives while that is taken (nil
// when nobody can hold it: a latch), and the wait. Holder, when set, is
// the holder the error of a wait that ended must name.
type WaitCase struct {
	Name   string
	Busy   error
	Wait   func(ctx context.Context) error
	Holder string
}

// RequireWaitsEnd runs each wait with a ctx that ends 100 ms later, by its
// deadline and then by a cancel, and requires its error to name what it
// waited for and to match ctx's error and, when Busy is set, Busy and
// locked (redisync.ErrLocked); locked not otherwise.
func RequireWaitsEnd(t testing.TB, ctx context.Context, locked error, waits []WaitCase) {
	t.Helper()
	for _, w := range waits {
		dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := w.Wait(dctx)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, w.Name)
		require.Contains(t, err.Error(), w.Name, "the error names what it waited for")
		if w.Holder != "" {
			require.Contains(t, err.Error(), "(held by "+w.Holder+")", "the error names the holder")
		}
		if w.Busy != nil {
			require.ErrorIs(t, err, w.Busy, w.Name)
			require.ErrorIs(t, err, locked, w.Name)
		} else {
			require.NotErrorIs(t, err, locked, w.Name)
		}
		t.Logf("%v", err)

		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(100*time.Millisecond, cancel)
		err = w.Wait(cctx)
		cancel()
		require.ErrorIs(t, err, context.Canceled, w.Name)
		require.Contains(t, err.Error(), w.Name)
	}
}
