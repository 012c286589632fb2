package redisync_test

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redisync/redisync"
)

// A job written for redsync,
//
//	m := rs.NewMutex("invoices", redsync.WithExpiry(10*time.Second))
//	if err := m.LockContext(ctx); err != nil { // 32 tries, then ErrFailed
//		return err
//	}
//	defer m.UnlockContext(ctx)
//	for _, b := range batches {
//		if ok, err := m.ExtendContext(ctx); !ok || err != nil {
//			return errLost
//		}
//		save(ctx, b)
//	}
//
// with redisync: Lock waits as long as ctx allows, the watchdog extends the
// lease (here a short one, which the job outlasts), Err says whether it
// could, and the writes carry the fencing token so that a late one is
// refused.
func Example_redsyncJob() {
	c, err := redisync.DialURL("redis://"+redisAddr(), redisync.WithWatchdogLease(300*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	l, err := c.Mutex("example:invoices").Lock(ctx)
	if err != nil {
		panic(err) // ctx ended, the Client was closed, or Redis refused
	}
	defer l.Unlock(context.WithoutCancel(ctx))
	for b := range 3 {
		if err := l.Err(); err != nil {
			fmt.Println("lost:", err)
			return
		}
		time.Sleep(150 * time.Millisecond) // the batch's work
		err := c.FencedSet(l.Context(), "example:invoices:last-batch", strconv.Itoa(b), l.Token())
		fmt.Println("batch", b, "saved:", err == nil)
	}
	// Output:
	// batch 0 saved: true
	// batch 1 saved: true
	// batch 2 saved: true
}
