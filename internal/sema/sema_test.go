package sema

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func woken(t *Ticket) bool {
	select {
	case <-t.C:
		return true
	default:
		return false
	}
}

func TestReleaseWakesOneOldestFirst(t *testing.T) {
	var s Sema
	s.Join()
	s.Join()
	a, b := s.Wait(), s.Wait()
	s.Release(1)
	require.True(t, woken(a))
	require.False(t, woken(b))
	s.Release(1)
	require.True(t, woken(b))
}

func TestWakeUpKeptForMemberNotWaitingYet(t *testing.T) {
	var s Sema
	s.Join()
	s.Release(1) // the member is busy elsewhere
	require.True(t, woken(s.Wait()))
	require.False(t, woken(s.Wait()), "one release, one wake-up")
}

func TestStoredWakeUpsNeverExceedMembers(t *testing.T) {
	var s Sema
	s.Join()
	s.Release(5)
	require.True(t, woken(s.Wait()))
	require.False(t, woken(s.Wait()))
	s.Leave()
	s.Release(3)
	require.False(t, woken(s.Wait()), "nobody left to use a wake-up")
}

func TestCancelPassesUnconsumedWakeUpOn(t *testing.T) {
	var s Sema
	s.Join()
	s.Join()
	a, b := s.Wait(), s.Wait()
	s.Release(1) // goes to a
	a.Cancel()   // a leaves without using it
	require.True(t, woken(b))
}

func TestCancelQueuedTicket(t *testing.T) {
	var s Sema
	s.Join()
	s.Join()
	a, b := s.Wait(), s.Wait()
	a.Cancel()
	s.Release(1)
	require.True(t, woken(b))
	require.False(t, woken(a))
}

func TestReleaseAllWakesEveryone(t *testing.T) {
	var s Sema
	for range 3 {
		s.Join()
	}
	a, b := s.Wait(), s.Wait()
	s.ReleaseAll()
	require.True(t, woken(a))
	require.True(t, woken(b))
	require.True(t, woken(s.Wait()), "the member that was not waiting looks too")
	require.False(t, woken(s.Wait()))
}

func TestSelectFriendly(t *testing.T) {
	var s Sema
	s.Join()
	tk := s.Wait()
	go func() {
		time.Sleep(10 * time.Millisecond)
		s.Release(1)
	}()
	select {
	case <-tk.C:
	case <-time.After(5 * time.Second):
		t.Fatal("not woken")
	}
}
