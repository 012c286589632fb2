package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// runE: a holder keeps the lock while 20 waiters on 4 clients arrive one by
// one, at least eGap apart, each once the previous one's first attempt
// reached the server; then it unlocks and every waiter takes the lock once and
// unlocks at once. It measures the time from the holder's unlock to the last
// waiter's unlock, the acquire attempts the server saw in that window per
// grant, and the pairs of waiters served in the opposite order of their
// arrival (order inversions, out of 190 pairs).
func runE(ctx context.Context, e *env, lib *library) (metrics, error) {
	s := e.size
	cs, closeAll, err := connectN(lib, e.cfg(s.lease), s.eClients+1)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	const name = "e"
	holder, waiters := cs[0], cs[1:]
	lctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	h0, err := holder.Lock(lctx, name)
	cancel()
	if err != nil {
		return nil, err
	}
	settle := 50*time.Millisecond + 2*lib.poll
	limit := time.Duration(s.eWaiters)*(s.eGap+lib.poll+time.Second) + settle + s.opTimeout
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	q := &eQueue{ctx: ctx, rctx: rctx, name: name, opTimeout: s.opTimeout}
	for i := range s.eWaiters {
		if err := q.arrive(e, lib, waiters[i%len(waiters)], i); err != nil {
			cancel()
			_ = waitGroup(&q.wg, limit)
			_ = unlockSoon(ctx, h0, s.opTimeout)
			return nil, err
		}
	}
	_ = sleep(ctx, settle)
	st0, err := e.commandStats(ctx)
	if err != nil {
		_ = unlockSoon(ctx, h0, s.opTimeout)
		return nil, err
	}
	t0 := time.Now()
	if err := unlockSoon(ctx, h0, s.opTimeout); err != nil {
		return nil, fmt.Errorf("holder's unlock: %w", err)
	}
	if err := waitGroup(&q.wg, limit+s.opTimeout); err != nil {
		return nil, err
	}
	st1, err := e.commandStats(ctx)
	if err != nil {
		return nil, err
	}
	if len(q.errs) > 0 {
		return nil, fmt.Errorf("%d of %d waiters failed: %w", len(q.errs), s.eWaiters, q.errs[0])
	}
	grants := int64(len(q.order))
	return metrics{
		"E.total":      ms(q.lastAt.Sub(t0)),
		"E.attempts":   float64(lib.attempts(delta(st0, st1), grants+1)) / float64(grants),
		"E.inversions": float64(inversions(q.order)),
	}, nil
}

// eQueue is E's waiters: each takes the lock once it is its turn, and
// unlocks at once.
type eQueue struct {
	ctx       context.Context // for unlocking
	rctx      context.Context // for waiting
	name      string
	opTimeout time.Duration

	mu     sync.Mutex
	order  []int     // arrival numbers, in grant order
	lastAt time.Time // the last waiter's unlock
	errs   []error
	wg     sync.WaitGroup
}

// arrive starts waiter i on c. It returns once the server saw the waiter's
// first attempt (or a second has passed), and eGap after it started: arrival
// order is the order in which the attempts reached Redis, even on a loaded
// machine.
func (q *eQueue) arrive(e *env, lib *library, c locker, i int) error {
	before, err := e.commandStats(q.ctx)
	if err != nil {
		return err
	}
	next := time.Now().Add(e.size.eGap)
	q.wg.Go(func() { q.wait(c, i) })
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		now, err := e.commandStats(q.ctx)
		if err != nil || lib.attempts(delta(before, now), 0) >= 1 {
			break
		}
		_ = sleep(q.ctx, time.Millisecond)
	}
	_ = sleep(q.ctx, time.Until(next))
	return nil
}

// wait is waiter i: it takes the lock on c and unlocks it at once.
func (q *eQueue) wait(c locker, i int) {
	h, err := c.Lock(q.rctx, q.name)
	if err != nil {
		q.mu.Lock()
		q.errs = append(q.errs, err)
		q.mu.Unlock()
		return
	}
	q.mu.Lock()
	q.order = append(q.order, i)
	q.mu.Unlock()
	err = unlockSoon(q.ctx, h, q.opTimeout)
	q.mu.Lock()
	if err != nil {
		q.errs = append(q.errs, fmt.Errorf("unlock: %w", err))
	}
	if now := time.Now(); now.After(q.lastAt) {
		q.lastAt = now
	}
	q.mu.Unlock()
}

// inversions counts the pairs served in the opposite order of their
// arrival numbers.
func inversions(order []int) int {
	n := 0
	for a := range order {
		for b := a + 1; b < len(order); b++ {
			if order[a] > order[b] {
				n++
			}
		}
	}
	return n
}
