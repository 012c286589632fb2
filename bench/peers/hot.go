package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// runH: a hot key in one service. hGoroutines goroutines of one client (one
// process: the handlers of one pod) lock and unlock one key in a loop, with
// runB's checks inside: nobody else inside (overlaps), a shared counter
// incremented with a separate load and store (lost updates). Meanwhile a
// goroutine of another client, the foreign waiter, locks the same key again
// and again: it waits, holds the lock hHold, unlocks, and sleeps a random
// hGap before the next time. Its waits show what the first client's
// goroutines cost another process that wants the key.
//
// Throughput counts the cycles of the first client that end within the
// measured time; a goroutine starts no cycle after it, and ends the one it
// is in. The server's commands and CPU time are read before the
// start and after every goroutine stopped, and divided by every cycle of
// both clients in between.
func runH(ctx context.Context, e *env, lib *library) (metrics, error) {
	s := e.size
	var passed atomic.Int64
	cfg := e.cfg(s.lease)
	cfg.passed = &passed
	hot, err := lib.connect(cfg)
	if err != nil {
		return nil, err
	}
	defer hot.Close()
	foreign, err := lib.connect(e.cfg(s.lease))
	if err != nil {
		return nil, err
	}
	defer foreign.Close()
	const name = "h"
	for _, c := range []locker{hot, foreign} {
		if err := cycle(ctx, c, name, s.opTimeout); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	passed.Store(0)
	before, cpuBefore, err := e.serverSample(ctx)
	if err != nil {
		return nil, err
	}

	h := &hotKey{e: e, counts: make([]int64, s.hGoroutines), all: make([]int64, s.hGoroutines)}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range s.hGoroutines {
		wg.Go(func() { <-start; h.loop(ctx, hot, name, i) })
	}
	wg.Go(func() { <-start; h.foreignLoop(ctx, foreign, name) })
	h.stopAt = time.Now().Add(s.hDur)
	close(start)
	if err := waitGroup(&wg, s.hDur+2*s.opTimeout); err != nil {
		return nil, err
	}

	after, cpuAfter, err := e.serverSample(ctx)
	if err != nil {
		return nil, err
	}
	var hotCycles int64
	for _, n := range h.all {
		hotCycles += n
	}
	inTime, _ := spreadOf(h.counts)
	cycles := hotCycles + int64(len(h.waits))
	m := metrics{
		"H.cycles":   float64(inTime) / s.hDur.Seconds(),
		"H.overlaps": float64(h.overlaps.Load()),
		"H.lost":     float64(cycles - h.counter.Load()),
		"H.errors":   float64(h.errs.Load()),
		"H.foreign":  float64(len(h.waits)),
	}
	if cycles > 0 {
		m["H.cmds"] = float64(delta(before, after).total) / float64(cycles)
		m["H.cpu"] = float64(cpuAfter-cpuBefore) / float64(time.Microsecond) / float64(cycles)
	}
	if lib.countsPasses && hotCycles > 0 {
		m["H.passed"] = 100 * float64(passed.Load()) / float64(hotCycles)
	}
	if len(h.waits) > 0 {
		m["H.wait_p50"] = ms(percentile(h.waits, 50))
		m["H.wait_p99"] = ms(percentile(h.waits, 99))
	}
	return m, nil
}

// hotKey is the state runH's goroutines share.
type hotKey struct {
	e      *env
	stopAt time.Time // set before they start

	inside, overlaps, counter, errs atomic.Int64
	counts, all                     []int64 // per goroutine of the hot client: cycles that ended in time, every cycle

	waits []time.Duration // the foreign waiter's, one per acquisition
}

// enter runs a critical section: it checks that nobody else is inside and
// increments the counter with a separate load and store, pausing in
// between.
func (h *hotKey) enter(pause func()) {
	if h.inside.Add(1) != 1 {
		h.overlaps.Add(1)
	}
	v := h.counter.Load()
	pause()
	h.counter.Store(v + 1)
	h.inside.Add(-1)
}

// loop is goroutine i of the hot client: lock, critical section, unlock,
// until the measured time ends. The end does not cut a wait short: a wait
// given up as its acquisition reaches Redis leaves the lock held until its
// lease runs out with the libraries that do not release it then, and the
// other client's waiter would wait for that.
func (h *hotKey) loop(ctx context.Context, c locker, name string, i int) {
	s := h.e.size
	for n := 0; n < s.hMax && ctx.Err() == nil && time.Now().Before(h.stopAt); n++ {
		lctx, cancel := context.WithTimeout(ctx, s.opTimeout)
		l, err := c.Lock(lctx, name)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			h.errs.Add(1)
			h.e.warn(err)
			continue
		}
		h.enter(runtime.Gosched)
		if err := unlockSoon(ctx, l, s.opTimeout); err != nil {
			h.errs.Add(1)
			h.e.warn(fmt.Errorf("unlock: %w", err))
		}
		h.all[i]++
		if time.Now().Before(h.stopAt) {
			h.counts[i]++
		}
	}
}

// foreignLoop is the other client's goroutine: it sleeps a random gap,
// waits for the lock, holds it hHold, unlocks, while the measured time
// lasts. A wait still going at the end of the measured time ends when the
// hot client's goroutines have stopped, and counts as long as it lasted.
func (h *hotKey) foreignLoop(ctx context.Context, c locker, name string) {
	s := h.e.size
	for n := 0; n < s.hForeignMax && ctx.Err() == nil; n++ {
		if sleep(ctx, s.hGap+jitter(s.hGapJitter)) != nil || !time.Now().Before(h.stopAt) {
			return
		}
		lctx, cancel := context.WithTimeout(ctx, s.opTimeout)
		t0 := time.Now()
		l, err := c.Lock(lctx, name)
		waited := time.Since(t0)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			h.errs.Add(1)
			h.e.warn(fmt.Errorf("other client: %w", err))
			continue
		}
		h.waits = append(h.waits, waited)
		h.enter(func() { time.Sleep(s.hHold) })
		if err := unlockSoon(ctx, l, s.opTimeout); err != nil {
			h.errs.Add(1)
			h.e.warn(fmt.Errorf("other client's unlock: %w", err))
		}
	}
}
