package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// holdTime is how long a holder keeps the lock while a waiter waits: long
// enough for the waiter to be blocked, plus a random phase across the
// waiter's polling period so that pollers are not measured at a lucky or
// unlucky phase.
func holdTime(lib *library) time.Duration {
	return 10*time.Millisecond + jitter(max(5*time.Millisecond, 2*lib.poll))
}

// runC: one client holds, another one waits; the holder unlocks; the latency
// runs from just before the Unlock to the waiter's Lock returning. The two
// clients swap roles at every hand-off.
func runC(ctx context.Context, e *env, lib *library) (metrics, error) {
	s := e.size
	cs, closeAll, err := connectN(lib, e.cfg(s.lease), 2)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	n := s.cPush
	if lib.poll >= 20*time.Millisecond {
		n = s.cPoll
	}
	const warm = 2
	lats, pings, err := handOffs(ctx, e, lib, cs, "c", warm+n)
	if err != nil {
		return nil, err
	}
	lats = lats[warm:]
	idle, err := e.idlePings(ctx, idlePings, func() time.Duration { return holdTime(lib) })
	if err != nil {
		return nil, err
	}
	push, err := e.idlePushes(ctx, idlePings, func() time.Duration { return holdTime(lib) }, false)
	if err != nil {
		return nil, fmt.Errorf("push floor: %w", err)
	}
	scriptPush, err := e.idlePushes(ctx, idlePings, func() time.Duration { return holdTime(lib) }, true)
	if err != nil {
		return nil, fmt.Errorf("push floor: %w", err)
	}
	p50, p99, ping, idlePing := percentile(lats, 50), percentile(lats, 99), percentile(pings, 50), percentile(idle, 50)
	return metrics{
		"C.push/idleping":       float64(percentile(push, 50)) / float64(idlePing),
		"C.scriptpush/idleping": float64(percentile(scriptPush, 50)) / float64(idlePing),
		"C.n":                   float64(len(lats)),
		"C.p50":                 ms(p50),
		"C.p99":                 ms(p99),
		"C.ping":                float64(ping) / float64(time.Microsecond),
		"C.p50/ping":            float64(p50) / float64(ping),
		"C.p99/ping":            float64(p99) / float64(ping),
		"C.idleping":            float64(idlePing) / float64(time.Microsecond),
		"C.p50/idleping":        float64(p50) / float64(idlePing),
	}, nil
}

// idlePings is how many PINGs runC sends after an idle as long as a
// holder's, for the hand-off's other yardstick.
const idlePings = 30

// handOffs passes the lock name n times between cs[0] and cs[1] and returns
// the latencies, and PING round trips sent while the holder held the lock.
func handOffs(ctx context.Context, e *env, lib *library, cs []locker, name string, n int) (lats, pings []time.Duration, err error) {
	timeout := e.size.opTimeout
	lctx, cancel := context.WithTimeout(ctx, timeout)
	h, err := cs[0].Lock(lctx, name)
	cancel()
	if err != nil {
		return nil, nil, err
	}
	type result struct {
		h   *held
		err error
		at  time.Time
	}
	lats = make([]time.Duration, 0, n)
	for i := range n {
		if pings, err = e.pings(ctx, pings, 3); err != nil {
			_ = unlockSoon(ctx, h, timeout)
			return nil, nil, err
		}
		to := cs[(i+1)%2]
		done := make(chan result, 1)
		go func() {
			lctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			h, err := to.Lock(lctx, name)
			done <- result{h, err, time.Now()}
		}()
		select {
		case r := <-done:
			_ = unlockSoon(ctx, h, timeout)
			if r.err != nil {
				return nil, nil, r.err
			}
			_ = unlockSoon(ctx, r.h, timeout)
			return nil, nil, errors.New("mutual exclusion violated: a waiter acquired the lock while it was held")
		case <-time.After(holdTime(lib)):
		}
		t0 := time.Now()
		uerr := unlockSoon(ctx, h, timeout)
		r := <-done // bounded by the waiter's timeout
		if r.err != nil {
			return nil, nil, fmt.Errorf("waiter: %w (holder's unlock: %v)", r.err, uerr)
		}
		if uerr != nil {
			_ = unlockSoon(ctx, r.h, timeout)
			return nil, nil, fmt.Errorf("unlock: %w", uerr)
		}
		lats = append(lats, r.at.Sub(t0))
		h = r.h
	}
	return lats, pings, unlockSoon(ctx, h, timeout)
}

// runD counts, on the client side, the calls into the Redis driver (round
// trips) and, on the server, every command executed (INFO commandstats,
// commands run inside scripts included): per uncontended lock+unlock, and
// per hand-off with 1 and with 8 waiters.
func runD(ctx context.Context, e *env, lib *library) (metrics, error) {
	s := e.size
	m := metrics{}
	var rt atomic.Int64
	cfg := e.cfg(s.lease)
	cfg.rt = &rt
	c, err := lib.connect(cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for range 20 {
		if err := cycle(ctx, c, "d", s.opTimeout); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	before, err := e.commandStats(ctx)
	if err != nil {
		return nil, err
	}
	rt0 := rt.Load()
	lats := make([]time.Duration, 0, s.dCycles)
	var pings []time.Duration
	for i := range s.dCycles {
		if i%10 == 0 { // PINGs are not counted: they go through the observer
			if pings, err = e.pings(ctx, pings, 2); err != nil {
				return nil, err
			}
		}
		t := time.Now()
		if err := cycle(ctx, c, "d", s.opTimeout); err != nil {
			return nil, err
		}
		lats = append(lats, time.Since(t))
	}
	rt1 := rt.Load()
	after, err := e.commandStats(ctx)
	if err != nil {
		return nil, err
	}
	n := float64(s.dCycles)
	p50 := percentile(lats, 50)
	m["D.rt"] = float64(rt1-rt0) / n
	m["D.cmds"] = float64(delta(before, after).total-int64(len(pings))) / n
	m["D.cycle"] = float64(p50) / float64(time.Microsecond)
	m["D.cycle/ping"] = float64(p50) / float64(percentile(pings, 50))
	for _, k := range s.dWaiters {
		rt, cmds, err := handOffCost(ctx, e, lib, k)
		if err != nil {
			return m, fmt.Errorf("hand-offs with %d waiters: %w", k, err)
		}
		m["D.rt_h"+strconv.Itoa(k)] = rt
		m["D.cmds_h"+strconv.Itoa(k)] = cmds
	}
	return m, nil
}

// handOffCost passes one lock around k+1 clients so that k of them wait at
// every hand-off: a holder keeps the lock dHold, unlocks, and asks for it
// again once somebody else has it. It returns round trips and commands per
// hand-off, counted over dHandoffs hand-offs after a warm-up.
func handOffCost(ctx context.Context, e *env, lib *library, k int) (rt, cmds float64, err error) {
	s := e.size
	var calls atomic.Int64
	cfg := e.cfg(s.lease)
	cfg.rt = &calls
	cs, closeAll, err := connectN(lib, cfg, k+1)
	if err != nil {
		return 0, 0, err
	}
	defer closeAll()
	warm := k + 3
	last := warm + s.dHandoffs
	limit := time.Duration(last)*(s.dHold+2*lib.poll+50*time.Millisecond) + s.opTimeout
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	p := &passing{
		ctx: ctx, rctx: rctx, cancel: cancel, e: e, calls: &calls,
		warm: warm, last: last, granted: make(chan struct{}),
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { p.hold(c) })
	}
	if err := waitGroup(&wg, limit+2*s.opTimeout); err != nil {
		return 0, 0, err
	}
	if p.firstErr != nil {
		return 0, 0, p.firstErr
	}
	if p.st0 == nil || p.st1 == nil {
		return 0, 0, fmt.Errorf("only %d hand-offs of %d within %v", p.grants, last, limit)
	}
	n := float64(s.dHandoffs)
	return float64(p.calls1-p.calls0) / n, float64(delta(p.st0, p.st1).total) / n, nil
}

// passing is the lock that handOffCost's clients pass around, and what is
// counted from the warm-th grant to the last.
type passing struct {
	ctx    context.Context // for unlocking
	rctx   context.Context // for the rest; cancelled at the last grant
	cancel context.CancelFunc
	e      *env
	calls  *atomic.Int64 // the clients' round trips

	warm, last int

	mu       sync.Mutex
	grants   int
	granted  chan struct{} // closed at the next grant
	firstErr error
	// Written by the holder of the warm-th and last grants.
	calls0, calls1 int64
	st0, st1       cmdStats
}

const passingName = "dh"

// hold is one of the clients: it takes the lock, keeps it dHold, unlocks
// it, and asks again once somebody else has it, until the last grant.
func (p *passing) hold(c locker) {
	s := p.e.size
	for n := 0; n <= p.last && p.rctx.Err() == nil; n++ {
		h, err := c.Lock(p.rctx, passingName)
		if err != nil {
			if p.rctx.Err() == nil {
				p.fail(err)
			}
			return
		}
		g, next := p.grant()
		switch g {
		case p.warm:
			p.calls0 = p.calls.Load()
			if p.st0, err = p.e.commandStats(p.rctx); err != nil {
				p.fail(err)
			}
		case p.last:
			p.calls1 = p.calls.Load()
			if p.st1, err = p.e.commandStats(p.rctx); err != nil {
				p.fail(err)
			}
			_ = unlockSoon(p.ctx, h, s.opTimeout)
			p.cancel() // the others stop waiting
			return
		}
		_ = sleep(p.rctx, s.dHold)
		if err := unlockSoon(p.ctx, h, s.opTimeout); err != nil {
			p.fail(fmt.Errorf("unlock: %w", err))
			return
		}
		select {
		case <-next:
		case <-p.rctx.Done():
			return
		}
	}
}

// grant counts a grant: it returns its number, and the channel closed at
// the next one.
func (p *passing) grant() (int, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.grants++
	close(p.granted)
	p.granted = make(chan struct{})
	return p.grants, p.granted
}

// fail keeps the first error and stops every client.
func (p *passing) fail(err error) {
	p.mu.Lock()
	if p.firstErr == nil {
		p.firstErr = err
	}
	p.mu.Unlock()
	p.cancel()
}
