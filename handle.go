package redisync

import (
	"context"
	"fmt"
)

// Every lock handle (Mutex, FairMutex, Group, Quorum, Semaphore, and each
// side of an RWMutex) acquires in the same three forms: Lock waits, TryLock
// makes a single attempt, Acquire waits in the background and delivers the
// Lease on a channel. Each form checks the handle and ctx first, so that
// bad input is an error (never a panic) and a failed Acquire is a Lease
// whose Err is set. The handle's methods keep their own doc comments and
// call lockHandle and acquireHandle with a handle.

// handle is one way of acquiring a lock.
type handle interface {
	// check reports why the handle cannot acquire with ctx: bad input, a
	// closed Client. The receiver may be nil.
	check(ctx context.Context) error
	// acquire runs one acquisition: a single attempt if try.
	acquire(ctx context.Context, try bool) (*Lease, error)
	// spans returns the Clients an acquisition runs on: closing any of
	// them ends it. Called only after check passed.
	spans() []*Client
}

// lockHandle is Lock (try false) and TryLock (try true) of h.
func lockHandle(ctx context.Context, h handle, try bool) (*Lease, error) {
	if err := h.check(ctx); err != nil {
		return nil, err
	}
	ctx, g := withGrace(ctx)
	defer g.end()
	return h.acquire(ctx, try)
}

// acquireHandle is Acquire of h: the acquisition runs on a goroutine that
// counts as one of each Client's, so that Close of any of them waits for
// it (and ends it).
func acquireHandle(ctx context.Context, h handle) <-chan *Lease {
	if err := h.check(ctx); err != nil {
		return (*Client)(nil).acquireAsync(ctx, err, nil)
	}
	clients := h.spans()
	for _, c := range clients[1:] {
		c.waiters.Add(1)
	}
	return clients[0].acquireAsync(ctx, nil, func(ctx context.Context) (*Lease, error) {
		defer func() {
			for _, c := range clients[1:] {
				c.waiters.Done()
			}
		}()
		ctx, g := withGrace(ctx)
		defer g.end()
		return h.acquire(ctx, false)
	})
}

// checkSpanning is checkHandle for a handle over several Clients, made by
// New+what.
func checkSpanning(what string, clients []*Client, err error, ctx context.Context) error {
	switch {
	case err != nil:
		return err
	case len(clients) == 0:
		return fmt.Errorf("%w: %s not made by New%s", ErrInvalidArgument, what, what)
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	for _, c := range clients {
		if c.isClosed() {
			return ErrClosed
		}
	}
	return nil
}

// Each handle's name, what it checks, and the Clients it spans: a nil
// handle has no name; a nil handle, one not made by its constructor, the
// invalid name or option its constructor found, a nil ctx and a closed
// Client are errors, never panics.

// Name returns the mutex's name.
func (m *Mutex) Name() string {
	if m == nil {
		return ""
	}
	return m.name
}

func (m *Mutex) check(ctx context.Context) error {
	if m == nil {
		return fmt.Errorf("%w: nil Mutex", ErrInvalidArgument)
	}
	return checkHandle("Mutex", m.c, m.err, ctx)
}

func (m *Mutex) spans() []*Client { return []*Client{m.c} }

// Name returns the mutex's name.
func (m *FairMutex) Name() string {
	if m == nil {
		return ""
	}
	return m.name
}

func (m *FairMutex) check(ctx context.Context) error {
	if m == nil {
		return fmt.Errorf("%w: nil FairMutex", ErrInvalidArgument)
	}
	return checkHandle("FairMutex", m.c, m.err, ctx)
}

func (m *FairMutex) spans() []*Client { return []*Client{m.c} }

// Name returns the lock's name.
func (m *RWMutex) Name() string {
	if m == nil {
		return ""
	}
	return m.name
}

func (m *RWMutex) check(ctx context.Context) error {
	if m == nil {
		return fmt.Errorf("%w: nil RWMutex", ErrInvalidArgument)
	}
	return checkHandle("RWMutex", m.c, m.err, ctx)
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

func (s *Semaphore) check(ctx context.Context) error {
	if s == nil {
		return fmt.Errorf("%w: nil Semaphore", ErrInvalidArgument)
	}
	return checkHandle("Semaphore", s.c, s.err, ctx)
}

// Name returns the latch's name.
func (l *Latch) Name() string {
	if l == nil {
		return ""
	}
	return l.name
}

func (l *Latch) check(ctx context.Context) error {
	if l == nil {
		return fmt.Errorf("%w: nil Latch", ErrInvalidArgument)
	}
	return checkHandle("Latch", l.c, l.err, ctx)
}

func (g *Group) check(ctx context.Context) error {
	if g == nil {
		return fmt.Errorf("%w: nil Group", ErrInvalidArgument)
	}
	return checkSpanning("Group", g.clients, g.err, ctx)
}

func (g *Group) spans() []*Client { return g.clients }

// Name returns the lock's name.
func (q *Quorum) Name() string {
	if q == nil {
		return ""
	}
	return q.name
}

func (q *Quorum) check(ctx context.Context) error {
	if q == nil {
		return fmt.Errorf("%w: nil Quorum", ErrInvalidArgument)
	}
	return checkSpanning("Quorum", q.clients, q.err, ctx)
}

func (q *Quorum) spans() []*Client { return q.clients }
