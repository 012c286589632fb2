package redisync_test

import (
	"context"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/redisson"
)

// The locks of package redisson in the tests of every primitive: the
// deadline tests (blockingCalls) and TestAcquireEndsAtOnceWhileRedisHangs.
// They are held through the Client's machinery, and must end at their
// deadline and deliver at once as the Client's own locks do.

func init() {
	type c = redisync.Client
	type lease = redisync.Lease
	redisync.AddBlockingCalls(func(
		forms func(kind string, setup func(context.Context, *c, string) error,
			lock, try func(context.Context, *c, string) (*lease, error),
			acquire func(context.Context, *c, string) <-chan *lease),
		add func(name string, setup, call func(context.Context, *c, string) error)) {
		r := redisson.New
		rsemPermits := func(ctx context.Context, c *c, n string) error {
			_, err := r(c).Semaphore(n).TrySetPermits(ctx, 1)
			return err
		}
		psemPermits := func(ctx context.Context, c *c, n string) error {
			_, err := r(c).PermitExpirableSemaphore(n).TrySetPermits(ctx, 1)
			return err
		}
		forms("redisson.Lock", nil,
			func(ctx context.Context, c *c, n string) (*lease, error) { return r(c).Lock(n).Lock(ctx) },
			func(ctx context.Context, c *c, n string) (*lease, error) { return r(c).Lock(n).TryLock(ctx) },
			func(ctx context.Context, c *c, n string) <-chan *lease { return r(c).Lock(n).Acquire(ctx) })
		forms("redisson.FencedLock", nil,
			func(ctx context.Context, c *c, n string) (*lease, error) { return r(c).FencedLock(n).Lock(ctx) },
			func(ctx context.Context, c *c, n string) (*lease, error) { return r(c).FencedLock(n).TryLock(ctx) },
			func(ctx context.Context, c *c, n string) <-chan *lease { return r(c).FencedLock(n).Acquire(ctx) })
		forms("redisson.FairLock", nil,
			func(ctx context.Context, c *c, n string) (*lease, error) { return r(c).FairLock(n).Lock(ctx) },
			func(ctx context.Context, c *c, n string) (*lease, error) { return r(c).FairLock(n).TryLock(ctx) },
			func(ctx context.Context, c *c, n string) <-chan *lease { return r(c).FairLock(n).Acquire(ctx) })
		forms("redisson.ReadWriteLock.read", nil,
			func(ctx context.Context, c *c, n string) (*lease, error) { return r(c).ReadWriteLock(n).RLock(ctx) },
			func(ctx context.Context, c *c, n string) (*lease, error) { return r(c).ReadWriteLock(n).TryRLock(ctx) },
			func(ctx context.Context, c *c, n string) <-chan *lease { return r(c).ReadWriteLock(n).RAcquire(ctx) })
		forms("redisson.ReadWriteLock.write", nil,
			func(ctx context.Context, c *c, n string) (*lease, error) { return r(c).ReadWriteLock(n).Lock(ctx) },
			func(ctx context.Context, c *c, n string) (*lease, error) { return r(c).ReadWriteLock(n).TryLock(ctx) },
			func(ctx context.Context, c *c, n string) <-chan *lease { return r(c).ReadWriteLock(n).Acquire(ctx) })
		forms("redisson.Semaphore", rsemPermits,
			func(ctx context.Context, c *c, n string) (*lease, error) { return r(c).Semaphore(n).Lock(ctx, 1) },
			func(ctx context.Context, c *c, n string) (*lease, error) { return r(c).Semaphore(n).TryLock(ctx, 1) },
			func(ctx context.Context, c *c, n string) <-chan *lease { return r(c).Semaphore(n).Acquire(ctx, 1) })
		forms("redisson.PermitExpirableSemaphore", psemPermits,
			func(ctx context.Context, c *c, n string) (*lease, error) {
				return r(c).PermitExpirableSemaphore(n).Lock(ctx, 1)
			},
			func(ctx context.Context, c *c, n string) (*lease, error) {
				return r(c).PermitExpirableSemaphore(n).TryLock(ctx, 1)
			},
			func(ctx context.Context, c *c, n string) <-chan *lease {
				return r(c).PermitExpirableSemaphore(n).Acquire(ctx, 1)
			})
		add("redisson.CountDownLatch.Wait",
			func(ctx context.Context, c *c, n string) error {
				_, err := r(c).CountDownLatch(n).TrySetCount(ctx, 1)
				return err
			},
			func(ctx context.Context, c *c, n string) error { return r(c).CountDownLatch(n).Wait(ctx) })
	})
	redisync.AddHangCases(func(ctx context.Context, holder, waiter *redisync.Client, prefix string) []redisync.HangCase {
		return []redisync.HangCase{
			redisync.NewHangCase("redisson",
				func() (*redisync.Lease, error) { return redisson.New(holder).Lock(prefix + "r").Lock(ctx) },
				redisson.New(waiter).Lock(prefix+"r").Acquire),
		}
	})
}
