package redisson_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/redisson"
)

var (
	// ctx is the context the examples work under.
	ctx = context.Background()
	// client returns the redisync Client the examples share, connected as
	// redisync.Dial connects, to a server the tests start.
	client = redisson.ClientForExamples
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
// c.FencedLock(name).
func ExampleClient_Lock() {
	c := redisson.New(client())
	lock := c.Lock("invoice:42")

	l, err := lock.Lock(ctx)
	if err != nil {
		panic(err)
	}
	// Java's lock.tryLock() now returns false, and lock.lock() waits.
	_, err = c.Lock("invoice:42").TryLock(ctx) // a second ownership
	fmt.Println("taken:", errors.Is(err, redisync.ErrLocked))

	st, err := lock.Inspect(ctx)
	if err != nil {
		panic(err)
	}
	// The holder's field is UUID:THREADID, the UUID being the Client's ID,
	// as Java's lock.isHeldByThread sees it; the hold count is Redisson's.
	fmt.Println("held by this Client:", st.Holders[0].ClientID() == client().ID(), "holds:", st.Holders[0].Holds)

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

// A Go worker and Java workers share Redisson's permit expirable
// semaphore: at most two exports run at once, and the permit of a worker
// that dies comes back when its lease ends. The Go side's Lease holds
// permit ids Java can read and release.
//
// The Java side (Redisson 3.x):
//
//	RPermitExpirableSemaphore sem = redisson.getPermitExpirableSemaphore("exports");
//	sem.trySetPermits(2);
//	String id = sem.acquire(10, TimeUnit.MINUTES); // a permit with a lease
//	try {
//	    export();
//	} finally {
//	    sem.release(id);       // publishes the permits available on redisson_sc:{exports}
//	}
func ExampleClient_PermitExpirableSemaphore() {
	c := redisson.New(client())
	sem := c.PermitExpirableSemaphore("exports")
	// Two permits in all, whatever was there: Java's setPermits(2).
	if _, err := sem.SetPermits(ctx, 2); err != nil {
		panic(err)
	}

	// A permit whose lease the Client's watchdog renews; with
	// redisson.WithLeaseTime(d), a fixed lease as Java's
	// acquire(d, unit).
	l, err := sem.Lock(ctx, 1)
	if err != nil {
		panic(err)
	}
	ids := sem.PermitIDs(l)
	fmt.Println("permit id:", len(ids[0]), "hex digits, as Java shows it")
	lease, err := sem.LeaseTime(ctx, ids[0]) // Java's getLeaseTime(id)
	if err != nil {
		panic(err)
	}
	fmt.Println("leased:", lease > 0)
	n, _ := sem.AvailablePermits(ctx)
	fmt.Println("available:", n)

	// Unlock gives the permit back and wakes the waiters, Java's included.
	if err := l.Unlock(ctx); err != nil {
		panic(err)
	}
	n, _ = sem.AvailablePermits(ctx)
	fmt.Println("available:", n)
	// A permit that is not held (released, expired, never taken).
	err = sem.Release(ctx, ids[0])
	fmt.Println("released twice:", errors.Is(err, redisync.ErrNotHeld))
	// Output:
	// permit id: 32 hex digits, as Java shows it
	// leased: true
	// available: 1
	// available: 2
	// released twice: true
}
