package redisync

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestIdleWaitingCostsLittle: goroutines of one Client waiting on locks
// another Client holds cost a few commands per lock and pass, not a script
// per waiter and second, and nothing per waiter.
func TestIdleWaitingCostsLittle(t *testing.T) {
	e := ownServer(t)
	const names, perName = 20, 25
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder := e.client(t, WithWatchdogLease(10*time.Minute))
	waiting := e.client(t)
	var leases []*Lease
	for i := range names {
		l, err := holder.Mutex(fmt.Sprint("idle:", i)).Lock(ctx)
		require.NoError(t, err)
		fl, err := holder.FairMutex(fmt.Sprint("idle:", i)).Lock(ctx)
		require.NoError(t, err)
		leases = append(leases, l, fl)
	}
	goroutines := runtime.NumGoroutine()
	var wg sync.WaitGroup
	for i := range names * perName {
		lock := waiting.Mutex(fmt.Sprint("idle:", i%names)).Lock
		if (i/names)%2 == 1 {
			lock = waiting.FairMutex(fmt.Sprint("idle:", i%names)).Lock
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := lock(ctx)
			if err == nil {
				l.Unlock(context.Background())
			} else if ctx.Err() == nil {
				t.Errorf("waiting: %v", err)
			}
		}()
	}
	eventually(t, 10*time.Second, func() bool {
		return queuedMutexWaiters(t, ctx, holder, "idle:0") >= perName/2
	}, "waiters did not queue")
	time.Sleep(500 * time.Millisecond) // every waiter settled
	before := commandCalls(t, e.server)
	const window = 3 * time.Second
	time.Sleep(window)
	d := commandDelta(t, before, commandCalls(t, e.server))
	extra := runtime.NumGoroutine() - goroutines - names*perName
	t.Logf("%d waiters on %d Mutex and %d FairMutex locks over %v: %d commands (%v), %d goroutines beyond the waiters",
		names*perName, names, names, window, d.all, d.calls, extra)
	// One script per pass (every second) renewing the Client's deadline on
	// each of the locks: an HSET per lock, and now and then the keys'
	// expiry.
	require.LessOrEqual(t, d.calls["evalsha"], int64(6), "scripts while waiting: %v", d.calls)
	require.LessOrEqual(t, d.all, int64(2*names*4+20), "commands while waiting: %v", d.calls)
	require.LessOrEqual(t, extra, 2*names+10, "goroutines beyond the waiters")
	cancel()
	wg.Wait()
	for _, l := range leases {
		require.NoError(t, l.Unlock(context.Background()))
	}
}
