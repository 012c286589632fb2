package sema

import (
	"flag"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var seed = flag.Uint64("seed", 0, "replays TestRandomSequences with this seed (0: a new one)")

func fired(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestWaitFiresAtTheNextBroadcast(t *testing.T) {
	var s Sema
	c := s.Wait(s.Gen())
	require.False(t, fired(c))
	s.Broadcast()
	require.True(t, fired(c))
}

func TestBroadcastWakesEveryWaiter(t *testing.T) {
	var s Sema
	g := s.Gen()
	cs := []<-chan struct{}{s.Wait(g), s.Wait(g), s.Wait(g)}
	s.Broadcast()
	for i, c := range cs {
		require.True(t, fired(c), "waiter %d", i)
	}
}

// A broadcast that came between a waiter's attempt and its wait (the reply
// was on its way) is not lost.
func TestWaitFiresAtOnceWhenTheGenerationMoved(t *testing.T) {
	var s Sema
	g := s.Gen()
	s.Broadcast()
	require.True(t, fired(s.Wait(g)))
	s.Broadcast()
	require.True(t, fired(s.Wait(g)), "more than one generation later")
}

// The wake-up a waiter between its attempt and its wait is owed cannot be
// taken by a goroutine that starts waiting after the broadcast, and that
// goroutine does not wake up for it.
func TestLaterWaiterCannotTakeAWakeUp(t *testing.T) {
	var s Sema
	owed := s.Gen()
	s.Broadcast()
	late := s.Wait(s.Gen())
	require.False(t, fired(late), "the broadcast was before its attempt")
	require.True(t, fired(s.Wait(owed)))
	require.False(t, fired(late))
	s.Broadcast()
	require.True(t, fired(late))
}

// A waiter that stops waiting gives nothing back and takes nothing with it.
func TestAbandonedWaitLeavesOthersTheirWakeUp(t *testing.T) {
	var s Sema
	g := s.Gen()
	_ = s.Wait(g) // abandoned
	c := s.Wait(g)
	s.Broadcast()
	require.True(t, fired(c))
}

func TestSelectFriendly(t *testing.T) {
	var s Sema
	c := s.Wait(s.Gen())
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(10 * time.Millisecond)
		s.Broadcast()
	}()
	select {
	case <-c:
	case <-time.After(5 * time.Second):
		t.Fatal("not woken")
	}
	<-done
}

// TestRandomSequences runs random sequences of reads, waits and broadcasts
// and checks every wait against the contract: it has fired exactly when a
// broadcast came after its generation was read. -seed replays a run.
func TestRandomSequences(t *testing.T) {
	sd := *seed
	if sd == 0 {
		sd = rand.Uint64()
	}
	t.Logf("seed %d (replay with -seed %d)", sd, sd)
	r := rand.New(rand.NewPCG(sd, sd))
	type waiter struct {
		read int // broadcasts before the generation was read
		gen  uint64
		c    <-chan struct{}
	}
	for range 200 {
		var s Sema
		var ws []*waiter
		broadcasts := 0
		for step := range 100 {
			switch op := r.IntN(4); {
			case op == 0:
				ws = append(ws, &waiter{read: broadcasts, gen: s.Gen()})
			case op == 1 && len(ws) > 0:
				if w := ws[r.IntN(len(ws))]; w.c == nil {
					w.c = s.Wait(w.gen)
				}
			case op == 2:
				s.Broadcast()
				broadcasts++
			default:
				for i, w := range ws {
					if w.c != nil {
						require.Equal(t, broadcasts > w.read, fired(w.c), "step %d waiter %d (seed %d)", step, i, sd)
					}
				}
			}
		}
	}
}

// Waiters and broadcasts on many goroutines: every waiter that read the
// generation before a broadcast is woken.
func TestConcurrentWaitersAreAllWoken(t *testing.T) {
	var s Sema
	const waiters, rounds = 16, 200
	var wg sync.WaitGroup
	read := make(chan struct{}, waiters)
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				g := s.Gen()
				read <- struct{}{}
				select {
				case <-s.Wait(g):
				case <-time.After(10 * time.Second):
					t.Error("a waiter was not woken")
				}
			}
		}()
	}
	for range rounds {
		for range waiters {
			<-read
		}
		s.Broadcast()
	}
	wg.Wait()
}
