package redisync_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync"
)

// A Redis key the lock guards takes writes through FencedSet: a holder
// that lost its lease, and wakes up after a newer holder wrote, is refused
// at the key itself.
func ExampleClient_FencedSet() {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr()}})
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	c, err := redisync.New(rc, redisync.WithWatchdogLease(300*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	m := c.Mutex("example:report-job")

	stale, _ := m.Lock(ctx)
	m.ForceUnlock(ctx) // the holder stalls and loses the lock meanwhile
	<-stale.Lost()

	next, _ := m.Lock(ctx)
	fmt.Println(c.FencedSet(ctx, "example:report", "from the new holder", next.Token()))
	next.Unlock(ctx)

	err = c.FencedSet(ctx, "example:report", "late", stale.Token()) // the stalled holder wakes up
	fmt.Println("late write refused:", errors.Is(err, redisync.ErrStaleToken))

	v, _ := rc.Do(ctx, rc.B().Hget().Key("example:report").Field("value").Build()).ToString()
	fmt.Println(v)
	// Output:
	// <nil>
	// late write refused: true
	// from the new holder
}
