package redisync_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync"
)

// TryLock tells "somebody else holds it" apart from failures.
func ExampleMutex_TryLock() {
	m := client().Mutex("example:report")

	l, err := m.TryLock(ctx)
	if err != nil {
		panic(err)
	}
	_, err = m.TryLock(ctx) // another worker, in this process or another
	fmt.Println(errors.Is(err, redisync.ErrLocked))
	l.Unlock(ctx)
	// Output: true
}

// WithFixedLease gives a lock a lease the watchdog does not renew: it ends
// after d unless released first (Redisson's leaseTime, the ttl of
// bsm/redislock, redsync's expiry). A deadline on ctx bounds the wait
// (Redisson's waitTime).
func ExampleWithFixedLease() {
	m := client().Mutex("example:export", redisync.WithFixedLease(500*time.Millisecond))

	l, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	wait, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = m.Lock(wait) // another acquisition waits 100ms at most
	fmt.Println("gave up waiting:", errors.Is(err, context.DeadlineExceeded))

	<-l.Lost() // a tenth of the lease before the key expires
	fmt.Println("lease ran out:", errors.Is(l.Err(), redisync.ErrExpired))
	// Output:
	// gave up waiting: true
	// lease ran out: true
}

// WithRenewedLease gives one lock a lease of its own that the watchdog
// renews (redsync's WithExpiry, set per mutex), here 8s instead of the
// Client's 30s: a holder that crashes keeps the nightly job's lock 8s at
// most, while the other locks of the Client keep the Client's lease.
func ExampleWithRenewedLease() {
	m := client().Mutex("example:nightly", redisync.WithRenewedLease(8*time.Second))

	l, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer l.Unlock(ctx)
	st, err := m.Inspect(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("lease left:", st.TTL > 0 && st.TTL <= 8*time.Second)
	// Output: lease left: true
}

// Extend pushes a fixed lease further out (redsync's Extend,
// bsm/redislock's Refresh): a holder that chose a short lease asks for more
// when its work runs long. It never extends a lock the lease no longer
// holds.
func ExampleLease_Extend() {
	m := client().Mutex("example:batch", redisync.WithFixedLease(500*time.Millisecond))

	l, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer l.Unlock(ctx)
	if err := l.Extend(ctx, 10*time.Second); err != nil {
		panic(err) // errors.Is(err, redisync.ErrNotHeld): lost, with its reason
	}
	st, err := m.Inspect(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("lease left:", st.TTL > 500*time.Millisecond)
	// Output: lease left: true
}

// Deadline is redsync's Until: when the lease ends unless renewed first,
// as the holder counts it (a fixed lease: when it runs out).
func ExampleLease_Deadline() {
	l, err := client().Mutex("example:until", redisync.WithFixedLease(2*time.Second)).Lock(ctx)
	if err != nil {
		panic(err)
	}
	until, ok := l.Deadline()
	fmt.Println("held:", ok, "ends within the lease:", time.Until(until) <= 2*time.Second)
	l.Unlock(ctx)
	_, ok = l.Deadline()
	fmt.Println("held after Unlock:", ok)
	// Output:
	// held: true ends within the lease: true
	// held after Unlock: false
}

// Inspect reads in one round trip whether the mutex is locked, by whom,
// how many holds its owner has and how long its lease has left. Whether a
// lease still holds its lock, it tells itself: Err is nil until then.
func ExampleMutex_Inspect() {
	c := client()
	m := c.Mutex("example:ledger")

	l, _ := m.Lock(ctx)
	inner, _ := m.Lock(l.Context()) // re-enters
	st, err := m.Inspect(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("locked:", st.Locked, "holds:", st.Holds, "by this client:", st.ClientID() == c.ID())
	fmt.Println("lease left:", st.TTL > 0 && st.TTL <= 30*time.Second)
	fmt.Println("held by this lease:", l.Err() == nil)
	inner.Unlock(ctx)
	l.Unlock(ctx)
	fmt.Println("held after Unlock:", l.Err() == nil)
	// Output:
	// locked: true holds: 2 by this client: true
	// lease left: true
	// held by this lease: true
	// held after Unlock: false
}

// WithReplicaAck waits for replicas to acknowledge each acquisition. The
// server here has none: the acquisition fails and nothing stays held.
func ExampleWithReplicaAck() {
	c, err := redisync.Dial(rueidis.ClientOption{InitAddress: []string{redisAddr()}},
		redisync.WithReplicaAck(1, 100*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	m := c.Mutex("example:acked")

	_, err = m.TryLock(ctx)
	fmt.Println(errors.Is(err, redisync.ErrNotReplicated))
	st, _ := m.Inspect(ctx)
	fmt.Println("locked:", st.Locked)
	// Output:
	// true
	// locked: false
}

// A FairMutex is granted in the order its waiters arrived, whichever Clients
// they wait on.
func ExampleFairMutex() {
	m := client().FairMutex("example:migrations")

	first, _ := m.Lock(ctx)
	var order []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 1; i <= 3; i++ {
		waiting := m.Acquire(ctx)
		wg.Go(func() {
			l := <-waiting
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			l.Unlock(ctx)
		})
		for st, err := m.Inspect(ctx); err == nil && st.Waiters < i; st, err = m.Inspect(ctx) {
			time.Sleep(time.Millisecond) // until waiter i holds its place
		}
	}
	first.Unlock(ctx)
	wg.Wait()
	fmt.Println(order)
	// Output: [1 2 3]
}
