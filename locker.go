package redisync

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// Locker adapts a lock to sync.Locker. Lock blocks until the lock is
// acquired; Unlock releases it. One Locker holds at most one lease at a
// time, as sync.Mutex does: its Lock is not reentrant.
//
// sync.Locker has no way to report errors, so: Lock waits through
// connection errors (logging them) until it acquires; it returns without the
// lock only on errors that waiting cannot cure (the Client is closed, the
// lock is invalid, its key holds something else), which Err then reports.
// Unlock of a Locker that holds nothing, or whose lease was lost, logs the
// error. A lost lease is not noticed by code that only calls Lock and
// Unlock: watch Lease().Lost() in long critical sections.
type Locker struct {
	lock func(context.Context) (*Lease, error)
	name string
	log  *slog.Logger

	mu    sync.Mutex
	lease *Lease
	err   error
}

func newLocker(c *Client, name string, lock func(context.Context) (*Lease, error)) *Locker {
	log := slog.Default()
	if c != nil && c.log != nil {
		log = c.log
	}
	return &Locker{lock: lock, name: name, log: log}
}

// Lock acquires the lock, waiting as long as it takes.
func (l *Locker) Lock() {
	if l == nil {
		return
	}
	if l.lock == nil {
		l.mu.Lock()
		l.err = fmt.Errorf("%w: Locker not made by a lock", ErrInvalidArgument)
		l.mu.Unlock()
		return
	}
	lease, err := l.lock(context.Background())
	l.mu.Lock()
	l.lease, l.err = lease, err
	l.mu.Unlock()
	if err != nil {
		l.log.Error("redisync: Locker.Lock returns without the lock", "name", l.name, "err", err)
	}
}

// Unlock releases the lease taken by Lock.
func (l *Locker) Unlock() {
	if l == nil {
		return
	}
	l.mu.Lock()
	lease := l.lease
	l.lease = nil
	l.mu.Unlock()
	if err := lease.Unlock(context.Background()); err != nil && l.log != nil {
		l.log.Error("redisync: Locker.Unlock", "name", l.name, "err", err)
	}
}

// Lease returns the lease held through the Locker, or nil.
func (l *Locker) Lease() *Lease {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease
}

// Err returns why the last Lock returned without the lock, or nil.
func (l *Locker) Err() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// RLocker adapts the read side of an RWMutex to sync.Locker, for code that
// wants Lock() and Unlock() without contexts or errors. Goroutines may share
// one RLocker, as they share a sync.RWMutex's: each Lock takes a read lease
// of its own and each Unlock releases the latest one still held (read
// leases are interchangeable). Its Lock is not reentrant: while a writer
// waits, it waits too.
//
// sync.Locker has no way to report errors, so: Lock waits through
// connection errors (logging them) until it acquires; it returns without a
// lease only on errors that waiting cannot cure (the Client is closed, the
// lock is invalid, one of its keys holds something else), which Err then
// reports. Unlock of an RLocker that holds nothing, or whose lease was
// lost, logs the error. A lost lease is not noticed by code that only calls
// Lock and Unlock: watch Lease().Lost() in long critical sections.
type RLocker struct {
	m      *RWMutex
	mu     sync.Mutex
	leases []*Lease
	err    error
}

// Lock acquires a read lease, waiting as long as it takes.
func (l *RLocker) Lock() {
	if l == nil {
		return
	}
	lease, err := l.m.RLock(context.Background())
	l.mu.Lock()
	if err == nil {
		l.leases = append(l.leases, lease)
	}
	l.err = err
	l.mu.Unlock()
	if err != nil {
		l.logger().Error("redisync: RLocker.Lock returns without the lock", "name", l.m.Name(), "err", err)
	}
}

// Unlock releases the latest read lease taken by Lock and not yet
// released.
func (l *RLocker) Unlock() {
	if l == nil {
		return
	}
	l.mu.Lock()
	var lease *Lease
	if n := len(l.leases); n > 0 {
		lease = l.leases[n-1]
		l.leases[n-1] = nil
		l.leases = l.leases[:n-1]
	}
	l.mu.Unlock()
	if err := lease.Unlock(context.Background()); err != nil {
		l.logger().Error("redisync: RLocker.Unlock", "name", l.m.Name(), "err", err)
	}
}

func (l *RLocker) logger() *slog.Logger {
	if l.m != nil && l.m.c != nil {
		return l.m.c.log
	}
	return slog.Default()
}

// Lease returns the latest read lease held through the RLocker, or nil.
func (l *RLocker) Lease() *Lease {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.leases); n > 0 {
		return l.leases[n-1]
	}
	return nil
}

// Err returns why the last Lock returned without a lease, or nil.
func (l *RLocker) Err() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}
