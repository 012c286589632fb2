package redisync

import (
	"context"
	"time"
)

const defaultWaiterExpiry = 24 * time.Second

// WithWaiterExpiry sets how long the places of a Mutex or FairMutex's
// waiters outlive their Client (its process died, its connection broke) in
// the lock's queue (default 24s). A live Client renews one deadline per
// lock for all its waiters there every third of it. A release that hands
// the lock to a dead waiter gives it a lease of the claim window (3s, or
// the expiry if shorter), which only a live waiter's Client renews: the
// queue stalls no longer than that behind a dead head, and a dead Client's
// other places are passed over once the expiry has passed. It must be at
// least a millisecond. Other locks reject it: their methods return
// ErrInvalidArgument.
func WithWaiterExpiry(d time.Duration) LockOption {
	return func(c *lockConfig) {
		c.waiterExpiry, c.given = d, c.given|optWaiterExpiry
		if d < time.Millisecond {
			c.waiterExpiry = -1
		}
	}
}

// FairMutex is a reentrant distributed lock that is granted strictly in the
// order acquisitions first reached Redis, across clients and processes.
// Apart from that it behaves as a Mutex: the same leases (watchdog or fixed,
// Lost with a reason, Context for re-entry, fencing tokens), the same
// Acquire, Lock and TryLock forms. It is a cheap handle, safe for concurrent
// use. Unlike a Mutex it is never passed on locally between goroutines of
// one Client (WithLocalPasses): every hand-off goes through Redis, in the
// order of the queue there.
//
// A waiter that does not get the lock at once takes a place at the tail of
// the lock's queue. A release hands the lock to the waiter at the head, as
// the Mutex's does: one message, whatever the number of waiters. A waiter
// whose context ends leaves the queue at once, giving back a lock handed to
// it meanwhile; one whose process died is passed over once its place expires
// (WithWaiterExpiry). Deadlines are the Redis server's time, never a
// client's clock. TryLock never queues, and fails (ErrLocked) while others
// wait, even if the lock itself is free.
type FairMutex struct {
	c    *Client
	name string
	keys lockKeys
	cfg  lockConfig
	err  error
	q    queuedLock
}

// fairKind is the kind of FairMutex holders: renewed and released as Mutex
// holders are (the keys have the same shapes); only acquisitions differ.
var fairKind = &leaseKind{
	primitive:   "fair",
	tracked:     true,
	forceMarked: true,
	renew:       renewScript,
	release:     releaseScript,
	releaseAll:  mutexKind.releaseAll,
	unlock:      mutexKind.unlock,
}

func (c *Client) fairKeysFor(name string) lockKeys {
	return c.queuedKeys("fair", "fairch", "fairq", "fairw", name)
}

// FairMutex returns the fair mutex with the given name. Names follow the
// rules of Mutex; a FairMutex and a Mutex of the same name are different
// locks. An invalid name or option is reported by every method, as
// ErrInvalidArgument.
func (c *Client) FairMutex(name string, opts ...LockOption) *FairMutex {
	m := &FairMutex{c: c, name: name}
	if m.cfg, m.err = newLockConfig(c, "FairMutex", name, lockConfig{waiterExpiry: defaultWaiterExpiry}, optFixedLease|optWaiterExpiry|optRenewedLease, opts); m.err == nil {
		m.keys = c.fairKeysFor(name)
		m.q.init(c, fairKind, name, m.keys, m.cfg, fairAcquireScript)
	}
	return m
}

// Lock acquires the mutex in queue order, waiting as long as ctx allows.
// Errors are as for Mutex.Lock; whenever Lock returns an error, the caller
// holds nothing and has left the queue.
func (m *FairMutex) Lock(ctx context.Context) (*Lease, error) { return lockHandle(ctx, m, false) }

// TryLock makes a single attempt and never queues. It returns ErrLocked
// when the mutex is held or others are waiting for it.
func (m *FairMutex) TryLock(ctx context.Context) (*Lease, error) { return lockHandle(ctx, m, true) }

// Acquire acquires the mutex in the background, as Mutex.Acquire does, and
// delivers one Lease on the returned channel. Cancelling ctx gives up the
// place in the queue.
func (m *FairMutex) Acquire(ctx context.Context) <-chan *Lease { return acquireHandle(ctx, m) }

func (m *FairMutex) acquire(ctx context.Context, try bool) (*Lease, error) {
	return m.q.acquire(ctx, try)
}

// FairMutexState is a snapshot of a fair mutex in Redis: the state of a
// Mutex, whose Waiters are the places in the queue.
type FairMutexState struct {
	MutexState
}

// Inspect reads the mutex's state in one round trip.
func (m *FairMutex) Inspect(ctx context.Context) (FairMutexState, error) {
	if err := m.check(ctx); err != nil {
		return FairMutexState{}, err
	}
	st, err := m.c.inspect(ctx, m.keys)
	return FairMutexState{MutexState: st}, err
}

// ForceUnlock deletes the lock whoever holds it and hands it to the head of
// the queue, as Mutex.ForceUnlock does.
func (m *FairMutex) ForceUnlock(ctx context.Context) (bool, error) {
	if err := m.check(ctx); err != nil {
		return false, err
	}
	return m.c.forceUnlock(ctx, m.keys)
}

// Locker returns a sync.Locker backed by the mutex.
func (m *FairMutex) Locker() *Locker {
	var c *Client
	if m != nil {
		c = m.c
	}
	return newLocker(c, m.Name(), m.Lock)
}
