package redisync_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync"
)

var (
	// ctx is the context the examples work under.
	ctx = context.Background()
	// client returns the one Client the examples share, connected as
	// Example shows; examples that show connecting, or options of a
	// Client, connect their own.
	client = redisync.ClientForExamples
	// redisAddr is the address of a Redis server: here one the tests start.
	redisAddr = redisync.RedisAddrForExamples
)

// A process connects once and takes all its locks through that Client.
// Acquire delivers the lease on a channel, so waiting for a lock combines
// with anything else in a select. Cancelling ctx abandons the wait, and a
// lock acquired just then is released: nothing stays held.
func Example() {
	c, err := redisync.Dial(rueidis.ClientOption{InitAddress: []string{redisAddr()}})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m := c.Mutex("example:orders:42")
	shutdown := make(chan struct{})
	select {
	case l := <-m.Acquire(ctx):
		if err := l.Err(); err != nil {
			fmt.Println("not acquired:", err)
			return
		}
		defer l.Unlock(context.Background())
		fmt.Println("holding", l.Name())
	case <-shutdown:
		cancel()
	}
	// Output: holding example:orders:42
}

// A process that makes its own rueidis client and shares it with redisync
// adds one line before making it, DetectChanges, so that its Client learns
// of a lost lock within a round trip, as a dialed one does.
func ExampleDetectChanges() {
	opt := rueidis.ClientOption{InitAddress: []string{redisAddr()}}
	detect := redisync.DetectChanges(&opt) // before rueidis.NewClient
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	c, err := redisync.New(rc, detect)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	fmt.Println(c.LossDetection())
	// Output: on change
}

// A Locker serves code written against sync.Locker.
func ExampleMutex_Locker() {
	var mu sync.Locker = client().Mutex("example:counter").Locker()
	counter := 0
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			mu.Lock()
			counter++
			mu.Unlock()
		})
	}
	wg.Wait()
	fmt.Println(counter)
	// Output: 10
}

// A long job watches Lost: when the lease is lost (here an operator breaks
// the lock), the job stops, and Err says why. The fencing token lets the
// resources the job writes to refuse a stale holder.
func ExampleLease_Lost() {
	c, _ := redisync.Dial(rueidis.ClientOption{InitAddress: []string{redisAddr()}},
		redisync.WithWatchdogLease(300*time.Millisecond))
	defer c.Close()
	m := c.Mutex("example:nightly-job")

	l, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	go m.ForceUnlock(ctx) // an operator, elsewhere

	work := time.After(time.Minute)
	select {
	case <-l.Lost():
		fmt.Println("stopped:", errors.Is(l.Err(), redisync.ErrExpired))
	case <-work:
		l.Unlock(ctx)
	}

	next, _ := m.Lock(ctx)
	fmt.Println("newer token:", next.Token() > l.Token())
	next.Unlock(ctx)
	// Output:
	// stopped: true
	// newer token: true
}

// Code that already holds a lock takes it again through the lease's
// context instead of deadlocking; each Unlock gives one hold back.
func ExampleLease_Context() {
	m := client().Mutex("example:account:7")

	outer, _ := m.Lock(ctx)
	inner, err := m.Lock(outer.Context()) // re-enters
	fmt.Println(err == nil, inner.Token() == outer.Token())
	st, _ := m.Inspect(ctx)
	fmt.Println("holds:", st.Holds)
	inner.Unlock(ctx)
	outer.Unlock(ctx)
	st, _ = m.Inspect(ctx)
	fmt.Println("locked:", st.Locked)
	// Output:
	// true true
	// holds: 2
	// locked: false
}

// WithClientName lets operators find the process that holds a lock:
// `redisync inspect` and `redisync watch` show the name beside the
// holder's Client id. Names are printable ASCII without spaces.
func ExampleWithClientName() {
	c, err := redisync.Dial(rueidis.ClientOption{InitAddress: []string{redisAddr()}},
		redisync.WithClientName(fmt.Sprintf("billing/pid-%d", os.Getpid())))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	_, err = redisync.Dial(rueidis.ClientOption{InitAddress: []string{redisAddr()}},
		redisync.WithClientName("billing worker"))
	fmt.Println(errors.Is(err, redisync.ErrInvalidArgument))
	// Output: true
}
