// Package sema wakes the goroutines of one process that wait for messages
// on one lock's channel.
//
// Messages are for latency, never for liveness: every waiter also looks
// again when a timer of its own ends, and a message only makes it look
// sooner. A broadcast is delivered to the local waiters it was meant for,
// and no other goroutine can take it: waiters are woken by generation, not
// by counted permits. Every broadcast starts a new generation. A waiter
// reads the generation (Gen) before the attempt that found the lock taken,
// and its Wait with that generation fires with the first broadcast after
// it: at once when one came while the attempt's reply was on its way. A
// goroutine that starts waiting later reads a later generation, so it can
// neither use up nor delay another's wake-up.
//
// Waits are channels, so a waiter selects on them together with its context
// and timers; a waiter that stops waiting has nothing to give back, and no
// goroutine is started per waiter.
package sema

import "sync"

// Sema is the wake-ups of one channel: a generation number that every
// broadcast moves on. The zero value is ready to use. Safe for concurrent
// use.
type Sema struct {
	mu  sync.Mutex
	gen uint64
	// ch is closed by the broadcast that ends generation gen; nil until a
	// waiter asks for it.
	ch chan struct{}
}

// closedChan is the channel of a Wait whose generation is over.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Gen returns the current generation. Read it before an attempt whose
// failure the caller will wait out with Wait.
func (s *Sema) Gen() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// Wait returns a channel that is closed by the first broadcast after
// generation gen: it is closed already when the generation moved on since
// gen was read. Every waiter of one generation receives the same channel;
// nothing needs to be done to stop waiting.
func (s *Sema) Wait(gen uint64) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen {
		return closedChan
	}
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// Broadcast starts a new generation: it wakes every goroutine waiting now,
// and every one that read an earlier generation and has yet to call Wait.
// It never blocks.
func (s *Sema) Broadcast() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}
