// Package sema is a wake-up semaphore for the goroutines of one process that
// wait on one lock: a release wakes one waiter, oldest first, and a wake-up
// that finds nobody waiting is kept for the next waiter instead of being lost.
//
// Waits are channels, so a waiter selects on them together with its context
// and timers, and no goroutine is started per waiter.
package sema

import "sync"

// Sema hands wake-ups to waiting tickets. Members are the goroutines that may
// use a wake-up (waiting now or about to wait); stored wake-ups never exceed
// them. The zero value is ready to use. Safe for concurrent use.
type Sema struct {
	mu      sync.Mutex
	members int
	permits int
	queue   []*Ticket
}

// Ticket is one wait. C receives a value when the ticket is woken.
type Ticket struct {
	C      <-chan struct{}
	c      chan struct{}
	s      *Sema
	queued bool
}

// Join adds a member; Leave removes one, dropping the stored wake-ups that no
// remaining member could use.
func (s *Sema) Join() {
	s.mu.Lock()
	s.members++
	s.mu.Unlock()
}

// Leave removes a member added by Join.
func (s *Sema) Leave() {
	s.mu.Lock()
	if s.members > 0 {
		s.members--
	}
	s.permits = min(s.permits, s.members)
	s.mu.Unlock()
}

// Wait returns a ticket that is woken by the next Release, or at once when a
// wake-up is stored. The waiter must receive from C or call Cancel.
func (s *Sema) Wait() *Ticket {
	c := make(chan struct{}, 1)
	t := &Ticket{C: c, c: c, s: s}
	s.mu.Lock()
	if s.permits > 0 {
		s.permits--
		c <- struct{}{}
	} else {
		t.queued = true
		s.queue = append(s.queue, t)
	}
	s.mu.Unlock()
	return t
}

// Cancel withdraws the ticket. A wake-up it received but did not consume is
// passed on to the next waiter, so abandoning a wait never loses one.
func (t *Ticket) Cancel() {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.queued {
		for i, q := range s.queue {
			if q == t {
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
				break
			}
		}
		t.queued = false
		return
	}
	select {
	case <-t.c:
		s.release(1)
	default:
	}
}

// Release wakes up to n waiting tickets, oldest first, and stores the rest of
// the wake-ups for members that are not waiting yet.
func (s *Sema) Release(n int) {
	s.mu.Lock()
	s.release(n)
	s.mu.Unlock()
}

func (s *Sema) release(n int) {
	for ; n > 0 && len(s.queue) > 0; n-- {
		t := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		t.queued = false
		t.c <- struct{}{}
	}
	if n > 0 {
		s.permits = min(s.permits+n, s.members)
	}
}

// ReleaseAll wakes every waiting ticket and stores a wake-up for every member
// that is not waiting, so that all of them look again.
func (s *Sema) ReleaseAll() {
	s.mu.Lock()
	woken := len(s.queue)
	s.release(woken)
	s.permits = max(s.permits, s.members-woken)
	s.mu.Unlock()
}
