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

	var (
		mu     sync.Mutex
		order  []int // arrival numbers, in grant order
		lastAt time.Time
		errs   []error
		wg     sync.WaitGroup
	)
	for i := range s.eWaiters {
		c := waiters[i%len(waiters)]
		before, err := e.commandStats(ctx)
		if err != nil {
			cancel()
			_ = waitGroup(&wg, limit)
			_ = unlockSoon(ctx, h0, s.opTimeout)
			return nil, err
		}
		next := time.Now().Add(s.eGap)
		wg.Go(func() {
			h, err := c.Lock(rctx, name)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			err = unlockSoon(ctx, h, s.opTimeout)
			mu.Lock()
			if err != nil {
				errs = append(errs, fmt.Errorf("unlock: %w", err))
			}
			if now := time.Now(); now.After(lastAt) {
				lastAt = now
			}
			mu.Unlock()
		})
		// The next waiter starts once the server saw this one's first
		// attempt (or a second has passed), and eGap after this one: arrival
		// order is the order in which the attempts reached Redis, even on a
		// loaded machine.
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
			now, err := e.commandStats(ctx)
			if err != nil || lib.attempts(delta(before, now), 0) >= 1 {
				break
			}
			_ = sleep(ctx, time.Millisecond)
		}
		_ = sleep(ctx, time.Until(next))
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
	if err := waitGroup(&wg, limit+s.opTimeout); err != nil {
		return nil, err
	}
	st1, err := e.commandStats(ctx)
	if err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%d of %d waiters failed: %w", len(errs), s.eWaiters, errs[0])
	}
	grants := int64(len(order))
	inversions := 0
	for a := range order {
		for b := a + 1; b < len(order); b++ {
			if order[a] > order[b] {
				inversions++
			}
		}
	}
	return metrics{
		"E.total":      ms(lastAt.Sub(t0)),
		"E.attempts":   float64(lib.attempts(delta(st0, st1), grants+1)) / float64(grants),
		"E.inversions": float64(inversions),
	}, nil
}
