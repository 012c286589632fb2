package redisync_test

import (
	"errors"
	"fmt"

	"github.com/redisync/redisync"
)

// A Go service and a Java service on one lock: the Go side takes the lock
// Java's Redisson knows as redisson.getLock("invoice:42"), in Redisson's
// own layout. While either side holds it, the other waits; either side's
// unlock wakes the other's waiters with Redisson's unlock message.
//
// The Java side (Redisson 3.x):
//
//	RedissonClient redisson = Redisson.create(config); // same Redis
//	RLock lock = redisson.getLock("invoice:42");
//	lock.lock();                // watchdog lease, renewed every third
//	try {
//	    bill(42);
//	} finally {
//	    lock.unlock();          // publishes 0 on redisson_lock__channel:{invoice:42}
//	}
//
// For Lease.Token to mean what Java's lockAndGetToken() means, both sides
// use the fenced lock: redisson.getFencedLock(name) and
// c.RedissonFencedLock(name).
func ExampleClient_RedissonLock() {
	c := client()
	lock := c.RedissonLock("invoice:42")

	l, err := lock.Lock(ctx)
	if err != nil {
		panic(err)
	}
	// Java's lock.tryLock() now returns false, and lock.lock() waits.
	_, err = c.RedissonLock("invoice:42").TryLock(ctx) // a second ownership
	fmt.Println("taken:", errors.Is(err, redisync.ErrLocked))

	st, err := lock.Inspect(ctx)
	if err != nil {
		panic(err)
	}
	// The holder's field is UUID:THREADID, the UUID being the Client's ID,
	// as Java's lock.isHeldByThread sees it; the hold count is Redisson's.
	fmt.Println("held by this Client:", st.Holders[0].ClientID() == c.ID(), "holds:", st.Holders[0].Holds)

	if err := l.Unlock(ctx); err != nil {
		panic(err)
	}
	st, _ = lock.Inspect(ctx)
	fmt.Println("locked:", st.Locked)
	// Output:
	// taken: true
	// held by this Client: true holds: 1
	// locked: false
}
