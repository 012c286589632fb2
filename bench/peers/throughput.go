package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// runA: 32 goroutines of one client (one process), one key each, lock and
// unlock as fast as they can. Only cycles that end within the measured time
// count: one that stalls past it does not stretch the time of the others.
func runA(ctx context.Context, e *env, lib *library) (metrics, error) {
	s := e.size
	c, err := lib.connect(e.cfg(s.lease))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var total, errs atomic.Int64
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	var stopAt time.Time // set before start is closed
	for i := range s.aGoroutines {
		ready.Add(1)
		done.Go(func() {
			name := "a:" + strconv.Itoa(i)
			err := cycle(ctx, c, name, s.opTimeout) // loads scripts, opens connections
			ready.Done()
			if err != nil {
				errs.Add(1)
				e.warn(err)
				return
			}
			<-start
			for n := 0; n < s.aMax && ctx.Err() == nil && time.Now().Before(stopAt); n++ {
				if err := cycle(ctx, c, name, s.opTimeout); err != nil {
					errs.Add(1)
					e.warn(err)
					continue
				}
				if time.Now().Before(stopAt) {
					total.Add(1)
				}
			}
		})
	}
	ready.Wait()
	t0 := time.Now()
	stopAt = t0.Add(s.aDur)
	close(start)
	if err := waitGroup(&done, s.aDur+2*s.opTimeout); err != nil {
		return nil, err
	}
	return metrics{
		"A.cycles": float64(total.Load()) / s.aDur.Seconds(),
		"A.errors": float64(errs.Load()),
	}, nil
}

// runB: 8 clients (8 processes), one goroutine each, on one key. Inside the
// critical section every goroutine checks that nobody else is inside
// (overlaps) and increments a shared counter with a separate load and store,
// so that two holders at once lose an update (lost updates = cycles -
// counter). Throughput counts the cycles that end within the measured time.
func runB(ctx context.Context, e *env, lib *library) (metrics, error) {
	s := e.size
	cs, closeAll, err := connectN(lib, e.cfg(s.lease), s.bClients)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	const name = "b"
	for _, c := range cs {
		if err := cycle(ctx, c, name, s.opTimeout); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	var inside, overlaps, counter, errs atomic.Int64
	counts := make([]int64, len(cs)) // cycles that ended in time
	all := make([]int64, len(cs))    // every cycle, for lost updates
	start := make(chan struct{})
	var stopAt time.Time // set before start is closed
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			<-start
			lctx, cancel := context.WithDeadline(ctx, stopAt)
			defer cancel()
			for n := 0; n < s.bMax && lctx.Err() == nil; n++ {
				h, err := c.Lock(lctx, name)
				if err != nil {
					if lctx.Err() != nil || isCtxErr(err) {
						break // the time is up (the driver may notice before the context does)
					}
					errs.Add(1)
					e.warn(err)
					continue
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				v := counter.Load()
				runtime.Gosched()
				counter.Store(v + 1)
				inside.Add(-1)
				if err := unlockSoon(ctx, h, s.opTimeout); err != nil {
					errs.Add(1)
					e.warn(fmt.Errorf("unlock: %w", err))
				}
				all[i]++
				if time.Now().Before(stopAt) {
					counts[i]++
				}
			}
		})
	}
	t0 := time.Now()
	stopAt = t0.Add(s.bDur)
	close(start)
	if err := waitGroup(&wg, s.bDur+2*s.opTimeout); err != nil {
		return nil, err
	}
	var cycles int64
	for _, n := range all {
		cycles += n
	}
	total, spread := spreadOf(counts)
	return metrics{
		"B.cycles":   float64(total) / s.bDur.Seconds(),
		"B.overlaps": float64(overlaps.Load()),
		"B.lost":     float64(cycles - counter.Load()),
		"B.spread":   spread,
		"B.errors":   float64(errs.Load()),
	}, nil
}

// spreadOf returns the sum of counts and the ratio of the least to the
// most (0 when all are 0).
func spreadOf(counts []int64) (total int64, spread float64) {
	var lo, hi int64
	for i, n := range counts {
		total += n
		if i == 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	if hi > 0 {
		spread = float64(lo) / float64(hi)
	}
	return total, spread
}
