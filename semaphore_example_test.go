package redisync_test

import (
	"errors"
	"fmt"
	"sync"

	"github.com/redisync/redisync"
)

// A semaphore bounds how many workers, across every process, run at once.
// Each acquisition is a lease on some permits, renewed while it is held
// and given back by Unlock (or when its holder dies and the lease runs
// out).
func ExampleSemaphore() {
	s := client().Semaphore("example:exports")
	// Every process may run this: the first one sets the size.
	if _, err := s.TrySetSize(ctx, 3); err != nil {
		panic(err)
	}
	defer s.Delete(ctx) // for the example only: the size outlives the process

	big, err := s.Lock(ctx, 2) // a job worth two permits
	if err != nil {
		panic(err)
	}
	st, _ := s.Inspect(ctx)
	fmt.Println("available:", st.Available)

	_, err = s.TryLock(ctx, 2)
	fmt.Println("two more:", errors.Is(err, redisync.ErrNoPermits))

	small, err := s.TryLock(ctx, 1)
	fmt.Println("one more:", err == nil)
	small.Unlock(ctx)
	big.Unlock(ctx)

	st, _ = s.Inspect(ctx)
	fmt.Println("available:", st.Available)
	// Output:
	// available: 1
	// two more: true
	// one more: true
	// available: 3
}

// A latch lets one process wait until others are done: here the workers
// count it down, and Wait returns once the count reaches zero.
func ExampleLatch() {
	const workers = 4
	done := client().Latch("example:batch:7")
	if _, err := done.TrySetCount(ctx, workers); err != nil {
		panic(err)
	}
	var mu sync.Mutex
	results := 0
	for range workers {
		go func() { // elsewhere, in other processes
			mu.Lock()
			results++
			mu.Unlock()
			done.CountDown(ctx)
		}()
	}
	if err := done.Wait(ctx); err != nil {
		panic(err)
	}
	mu.Lock()
	fmt.Println("results:", results)
	mu.Unlock()
	n, _ := done.Count(ctx)
	fmt.Println("count:", n)
	// Output:
	// results: 4
	// count: 0
}
