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

// runG: waiters at scale (every library), then held leases at scale
// (libraries that renew leases by themselves; n/a for the others).
func runG(ctx context.Context, e *env, lib *library) (metrics, error) {
	m := metrics{}
	if err := gWaiters(ctx, e, lib, m); err != nil {
		return m, fmt.Errorf("waiters: %w", err)
	}
	if lib.renewal == nil {
		return m, nil
	}
	if err := gLeases(ctx, e, lib, m); err != nil {
		return m, fmt.Errorf("held leases: %w", err)
	}
	return m, nil
}

// holderLease is the lease of the locks G's waiters wait for: long enough
// that their holder renews none of them while the waiting is measured.
const holderLease = 10 * time.Minute

// gWaiters: one client holds gNames locks; in another client (one process),
// gPerName goroutines wait for each of them. Once they settled, it measures
// the heap and goroutines they cost, the pub/sub channels the server has for
// them, and the calls per second the waiting client makes and the commands
// per second the server executes while nobody releases.
func gWaiters(ctx context.Context, e *env, lib *library, m metrics) error {
	s := e.size
	names, waiters := s.gNames, s.gNames*s.gPerName
	name := func(i int) string { return "g:" + strconv.Itoa(i%names) }
	holder, err := lib.connect(e.cfg(holderLease))
	if err != nil {
		return err
	}
	defer holder.Close()
	_, release, err := holdAll(ctx, e, holder, names, name)
	defer release()
	if err != nil {
		return err
	}

	g0, heap0 := runtime.NumGoroutine(), liveHeap()
	var calls atomic.Int64
	wcfg := e.cfg(s.lease)
	wcfg.rt = &calls
	w, err := lib.connect(wcfg)
	if err != nil {
		return err
	}
	defer w.Close()
	wctx, cancel := context.WithTimeout(ctx, s.gSettle+s.gWindow+time.Minute)
	defer cancel()
	var acquired, errs atomic.Int64
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() { gWait(ctx, wctx, e, w, name(i), &acquired, &errs) })
	}
	if err := sleep(ctx, s.gSettle); err != nil {
		return err
	}
	st0, err := e.commandStats(ctx)
	if err != nil {
		return err
	}
	t0, calls0 := time.Now(), calls.Load()
	if err := sleep(ctx, s.gWindow); err != nil {
		return err
	}
	calls1 := calls.Load()
	st1, err := e.commandStats(ctx)
	if err != nil {
		return err
	}
	el := time.Since(t0)
	heap1, g1 := liveHeap(), runtime.NumGoroutine()
	chans, err := e.channels(ctx)
	if err != nil {
		return err
	}
	cancel()
	if err := waitGroup(&wg, 30*time.Second); err != nil {
		return err
	}
	m["G.waiters"] = float64(waiters)
	m["G.names"] = float64(names)
	m["G.heap"] = (heap1 - heap0) / float64(waiters) / 1024
	m["G.goroutines"] = float64(g1 - g0 - waiters)
	m["G.channels"] = float64(chans)
	m["G.calls"] = float64(calls1-calls0) / el.Seconds()
	m["G.cmds"] = float64(delta(st0, st1).total) / el.Seconds()
	m["G.errors"] = float64(errs.Load() + acquired.Load())
	return nil
}

// gLeases: one client holds gLeases locks with the short lease; over three
// renewal periods it measures the renewal traffic, the CPU of this process
// and of the server, and the goroutines and heap the leases cost.
func gLeases(ctx context.Context, e *env, lib *library, m metrics) error {
	s := e.size
	n, lease := s.gLeases, s.shortLease
	period := lib.renewal(lease)
	g0, heap0 := runtime.NumGoroutine(), liveHeap()
	c, err := lib.connect(e.cfg(lease))
	if err != nil {
		return err
	}
	defer c.Close()
	helds, release, err := holdAll(ctx, e, c, n, func(i int) string { return "g2:" + strconv.Itoa(i) })
	defer release()
	if err != nil {
		return err
	}
	if err := sleep(ctx, period); err != nil {
		return err
	}
	st0, scpu0, err := e.serverSample(ctx)
	if err != nil {
		return err
	}
	cpu0, t0 := processCPU(), time.Now()
	if err := sleep(ctx, 3*period); err != nil {
		return err
	}
	cpu1, el := processCPU(), time.Since(t0)
	st1, scpu1, err := e.serverSample(ctx)
	if err != nil {
		return err
	}
	heap1, g1 := liveHeap(), runtime.NumGoroutine()
	lost := 0
	for _, h := range helds {
		select {
		case <-h.lost:
			lost++
		default:
		}
	}
	cmds := float64(delta(st0, st1).total)
	m["G2.leases"] = float64(n)
	m["G2.period"] = ms(period)
	m["G2.goroutines"] = float64(g1 - g0)
	m["G2.heap"] = (heap1 - heap0) / float64(n) / 1024
	m["G2.cmds"] = cmds / el.Seconds()
	m["G2.cmds/lease"] = cmds / (float64(el) / float64(period)) / float64(n)
	m["G2.cpu"] = 100 * float64(cpu1-cpu0) / float64(el)
	m["G2.server_cpu"] = 100 * float64(scpu1-scpu0) / float64(el)
	m["G2.lost"] = float64(lost)
	return nil
}

// gWait is one of gWaiters' waiters: it waits for name, held by another
// client, until wctx ends, and counts an acquisition and the errors as
// failures.
func gWait(ctx, wctx context.Context, e *env, w locker, name string, acquired, errs *atomic.Int64) {
	for try := 0; try < 1000 && wctx.Err() == nil; try++ {
		h, err := w.Lock(wctx, name)
		if err == nil {
			acquired.Add(1)
			e.warn(fmt.Errorf("a waiter acquired %s, which should have stayed held", name))
			_ = unlockSoon(ctx, h, e.size.opTimeout)
			return
		}
		if wctx.Err() != nil {
			return
		}
		errs.Add(1)
		e.warn(err)
		_ = sleep(wctx, 10*time.Millisecond)
	}
}

// holdAll takes n free locks on c, named by name, 32 at a time. Release
// unlocks those it took, even when it failed to take them all.
func holdAll(ctx context.Context, e *env, c locker, n int, name func(int) string) (helds []*held, release func(), err error) {
	helds = make([]*held, n)
	release = func() {
		_ = parallel(n, 32, func(i int) error {
			if helds[i] != nil {
				return unlockSoon(ctx, helds[i], e.size.opTimeout)
			}
			return nil
		})
	}
	err = parallel(n, 32, func(i int) (err error) {
		helds[i], err = lockRetry(ctx, e, c, name(i))
		return err
	})
	return helds, release, err
}

// lockRetry takes a free lock, trying three times: under load a library may
// time out (rueidislock gives a script 20 ms by default). Failed tries are
// reported as counted errors.
func lockRetry(ctx context.Context, e *env, c locker, name string) (*held, error) {
	var err error
	for range 3 {
		lctx, cancel := context.WithTimeout(ctx, e.size.opTimeout/3)
		var h *held
		h, err = c.Lock(lctx, name)
		cancel()
		if err == nil {
			return h, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		e.warn(fmt.Errorf("lock %s (retried): %w", name, err))
	}
	return nil, err
}
