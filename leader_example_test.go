package redisync_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync"
)

// lead waits to hold m, then runs work under a context that ends when the
// lease ends (lost, or released) and when shutdown ends, whichever comes
// first; context.Cause tells which. The lease's own Context does not end
// with the context given to Lock: it is merged with shutdown here.
func lead(shutdown context.Context, m *redisync.Mutex, work func(context.Context) error) error {
	l, err := m.Lock(shutdown)
	if err != nil {
		return err // shutdown ended first, or the Client was closed
	}
	defer l.Unlock(context.WithoutCancel(shutdown))

	ctx, cancel := context.WithCancelCause(l.Context()) // ends with the lease, carries it
	defer cancel(nil)
	stop := context.AfterFunc(shutdown, func() { cancel(context.Cause(shutdown)) })
	defer stop()
	return work(ctx)
}

// A leader, or a job that must run on one process at a time, stops when its
// lease is lost and when the process shuts down.
func Example_leader() {
	c, err := redisync.Dial(rueidis.ClientOption{InitAddress: []string{redisAddr()}},
		redisync.WithWatchdogLease(300*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	m := c.Mutex("example:leader")
	job := func(ctx context.Context) error {
		for {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(10 * time.Millisecond): // a step of the job
			}
		}
	}

	// In a program: shutdown, stop := signal.NotifyContext(ctx, syscall.SIGTERM).
	shutdown, stop := context.WithCancelCause(context.Background())
	err = lead(shutdown, m, func(ctx context.Context) error {
		stop(errors.New("SIGTERM")) // the process is asked to stop while the job runs
		return job(ctx)
	})
	fmt.Println("stopped:", err)

	err = lead(context.Background(), m, func(ctx context.Context) error {
		m.ForceUnlock(context.Background()) // an operator breaks the lock while the job runs
		return job(ctx)
	})
	fmt.Println("stopped, lease expired:", errors.Is(err, redisync.ErrExpired))
	// Output:
	// stopped: SIGTERM
	// stopped, lease expired: true
}
