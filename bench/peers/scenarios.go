package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// metrics are one library's numbers in one scenario of one run, by column
// key ("A.cycles"). A missing key is printed n/a.
type metrics map[string]float64

// scenario is one part of the comparison.
type scenario struct {
	id, title string
	// applies reports whether the scenario means anything for lib; nil: all.
	applies func(lib *library) bool
	run     func(ctx context.Context, e *env, lib *library) (metrics, error)
}

func scenarios() []*scenario {
	return []*scenario{
		{id: "A", title: "uncontended", run: runA},
		{id: "B", title: "contended", run: runB},
		{id: "C", title: "hand-off latency", run: runC},
		{id: "D", title: "round trips and commands", run: runD},
		{id: "E", title: "drain", run: runE},
		{id: "F", title: "lease-loss detection", run: runF, applies: func(l *library) bool { return l.lossSignal }},
		{id: "G", title: "scale", run: runG},
		{id: "H", title: "hot key", run: runH},
	}
}

// sizes are the counts and times of every scenario. Every loop is bounded by
// a count and by a time.
type sizes struct {
	pings      int           // PINGs per env for the round trip
	lease      time.Duration // lock validity / watchdog lease of A to E and G's waiters
	shortLease time.Duration // lease of F and of G's held leases
	opTimeout  time.Duration // bound of a wait that should not block long
	cellLimit  time.Duration // bound of one scenario for one library

	aGoroutines int
	aDur        time.Duration
	aMax        int // cycles per goroutine, at most

	bClients int
	bDur     time.Duration
	bMax     int // cycles per client, at most

	cPush, cPoll int // hand-offs measured: push-woken libraries, libraries polling every 20 ms or more

	dCycles   int   // sequential uncontended cycles
	dHandoffs int   // hand-offs counted per number of waiters
	dWaiters  []int // numbers of waiters
	dHold     time.Duration

	eClients, eWaiters int
	eGap               time.Duration // between two waiters' arrivals

	fSamples int

	gNames, gPerName int // waiters: gNames*gPerName goroutines on gNames names
	gLeases          int // held leases
	// gWindow is G's idle window: whole renewal periods of redisync's
	// waiters (a third of the 24 s waiter expiry), every lock renewed as
	// often whatever the phase.
	gSettle, gWindow time.Duration

	hGoroutines int // of the hot client
	hDur        time.Duration
	hMax        int           // cycles per goroutine, at most
	hHold       time.Duration // the other client's hold
	hGap        time.Duration // the other client's sleep between two holds: hGap plus up to hGapJitter
	hGapJitter  time.Duration
	hForeignMax int // the other client's acquisitions, at most
}

func fullSizes() sizes {
	return sizes{
		pings: 500, lease: 10 * time.Second, shortLease: 3 * time.Second, opTimeout: 10 * time.Second, cellLimit: 3 * time.Minute,
		aGoroutines: 32, aDur: 2 * time.Second, aMax: 1_000_000,
		bClients: 8, bDur: 2 * time.Second, bMax: 1_000_000,
		cPush: 100, cPoll: 30,
		dCycles: 500, dHandoffs: 30, dWaiters: []int{1, 8}, dHold: 10 * time.Millisecond,
		eClients: 4, eWaiters: 20, eGap: 5 * time.Millisecond,
		fSamples: 5,
		gNames:   1000, gPerName: 10, gLeases: 10_000, gSettle: 1500 * time.Millisecond, gWindow: 8 * time.Second,
		hGoroutines: 8, hDur: 2 * time.Second, hMax: 1_000_000,
		hHold: 100 * time.Microsecond, hGap: 2 * time.Millisecond, hGapJitter: 4 * time.Millisecond, hForeignMax: 10_000,
	}
}

func quickSizes() sizes {
	s := fullSizes()
	s.pings = 100
	s.shortLease = 600 * time.Millisecond
	s.cellLimit = time.Minute
	s.aDur, s.bDur, s.hDur = 250*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	s.cPush, s.cPoll = 10, 3
	s.dCycles, s.dHandoffs = 100, 6
	s.fSamples = 1
	s.gNames, s.gLeases = 100, 1000
	s.gSettle, s.gWindow = 500*time.Millisecond, 500*time.Millisecond
	return s
}

// connectN makes n clients of lib.
func connectN(lib *library, cfg clientConfig, n int) ([]locker, func(), error) {
	cs := make([]locker, 0, n)
	closeAll := func() {
		for _, c := range cs {
			c.Close()
		}
	}
	for range n {
		c, err := lib.connect(cfg)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		cs = append(cs, c)
	}
	return cs, closeAll, nil
}

// cycle locks and unlocks name once.
func cycle(ctx context.Context, c locker, name string, timeout time.Duration) error {
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	h, err := c.Lock(lctx, name)
	if err != nil {
		return err
	}
	return h.Unlock(lctx)
}

// unlockSoon unlocks h with a fresh context of its own.
func unlockSoon(ctx context.Context, h *held, timeout time.Duration) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	return h.Unlock(uctx)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// jitter is a random duration in [0, d).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(n, workers int, f func(i int) error) error {
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return first
}

// waitGroup waits for wg, at most d.
func waitGroup(wg *sync.WaitGroup, d time.Duration) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(d):
		return fmt.Errorf("goroutines still running after %v", d)
	}
}

// liveHeap is the heap in use after a collection.
func liveHeap() float64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc)
}

// processCPU is the CPU time (user + system) of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// isCtxErr reports whether err comes from a context ending.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
