package redisync

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// renewalsOf records the calls of the renewal script of a lock hash
// (renew.lua) that a reply-fault Client sends, renewals and checks (a
// lease of "0"), with when they were sent.
type renewalsOf struct {
	mu   sync.Mutex
	sent []sentRenewal
}

type sentRenewal struct {
	at   time.Time
	args []string
}

// observe has rf record every call of renew.lua sent from now on.
func (r *renewalsOf) observe(rf *replyFaults) {
	renewal := runs(renewScript)
	rf.Observe(func(cmd []string) {
		if renewal(cmd) {
			r.mu.Lock()
			r.sent = append(r.sent, sentRenewal{time.Now(), slices.Clone(scriptArgs(cmd))})
			r.mu.Unlock()
		}
	})
}

// naming returns the arguments of the calls sent after since that name
// owner: those that renew its lease, and with checks those that only
// check it too.
func (r *renewalsOf) naming(owner string, since time.Time, checks bool) [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var found [][]string
	for _, s := range r.sent {
		for i := 0; i+1 < len(s.args); i += 2 {
			if s.at.After(since) && s.args[i] == owner && (checks || s.args[i+1] != "0") {
				found = append(found, s.args)
			}
		}
	}
	return found
}

// watchedClient returns a reply-fault Client of a 3 s watchdog lease
// (renewals every second), the record of its renewals and checks, and
// another Client to force its locks with.
func watchedClient(t *testing.T, e *env) (c *Client, rf *replyFaults, other *Client, seen *renewalsOf) {
	c, rf = e.faultyClient(t, WithWatchdogLease(3*time.Second))
	seen = &renewalsOf{}
	seen.observe(rf)
	return c, rf, e.client(t), seen
}

// requireNoneAfterLoss waits for l's loss to be reported, then has the
// held reply come (open), and requires that nothing names l's owner,
// renewal or check, in the 300 ms after the loss.
func (r *renewalsOf) requireNoneAfterLoss(t *testing.T, l *Lease, open func()) {
	t.Helper()
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the force-unlocked lease was not reported lost")
	}
	lostAt := time.Now()
	open()
	time.Sleep(300 * time.Millisecond)
	require.Empty(t, r.naming(l.h.owner, lostAt, true), "renewed or checked after its loss was reported")
}

// firstRenewal returns match, which matches the calls of renew.lua that
// renew (not only check) one of the leases ls first, and held, which
// returns the lease the last call match matched renews first (nil before
// any).
func firstRenewal(ls ...*Lease) (match func(cmd []string) bool, held func() *Lease) {
	owners := map[string]*Lease{}
	for _, l := range ls {
		owners[l.h.owner] = l
	}
	var mu sync.Mutex
	var first *Lease
	match = func(cmd []string) bool {
		if !runs(renewScript)(cmd) {
			return false
		}
		args := scriptArgs(cmd)
		if len(args) < 2 || args[1] == "0" || owners[args[0]] == nil {
			return false
		}
		mu.Lock()
		first = owners[args[0]]
		mu.Unlock()
		return true
	}
	return match, func() *Lease {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
}

// TestWatchdogNeverRenewsALeaseAfterItsLoss: the watchdog's pass renews
// the leases of each kind of lock in turn; when the reply of one kind's
// renewals is held back, and a lease of another kind is force-unlocked and
// reported lost meanwhile, the pass does not go on to renew that lease once
// the reply came: the Client never renews a lease whose loss it reported.
func TestWatchdogNeverRenewsALeaseAfterItsLoss(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c, rf, other, seen := watchedClient(t, e)

		// Two kinds, each renewed in a batch of its own.
		m, fm := c.Mutex(t.Name()+":m"), c.FairMutex(t.Name()+":f")
		lm, err := m.Lock(ctx)
		require.NoError(t, err)
		lf, err := fm.Lock(ctx)
		require.NoError(t, err)

		// The first renewal batch's reply is held back; the lease it does
		// not renew is the other kind's, which the pass renews after it.
		renewsOne, first := firstRenewal(lm, lf)
		r, open := rf.gate(renewsOne, 1, false)
		defer open()
		select {
		case <-r.Ran():
		case <-time.After(10 * time.Second):
			t.Fatal("the watchdog renewed nothing")
		}
		held := first()
		victim, force := lf, func() (bool, error) { return other.FairMutex(fm.name).ForceUnlock(ctx) }
		if held == lf {
			victim, force = lm, func() (bool, error) { return other.Mutex(m.name).ForceUnlock(ctx) }
		}
		forced, err := force()
		require.NoError(t, err)
		require.True(t, forced)
		// The pass goes on with the other kind's batch, if it still would.
		seen.requireNoneAfterLoss(t, victim, open)
		require.NoError(t, held.Unlock(ctx))
	})
}

// TestTrackingNeverChecksALeaseAfterItsLoss: a Client that detects changes
// reads a lock's key again when Redis invalidates it, and has the watchdog
// check the holder when the read finds another owner. When that read's
// reply is held back until the watchdog's pass found the lock
// force-unlocked and reported the lease lost, the check is not sent: the
// Client sends nothing that names a lease whose loss it reported.
func TestTrackingNeverChecksALeaseAfterItsLoss(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c, rf, other, seen := watchedClient(t, e)
		m := c.Mutex(t.Name())
		l, err := m.Lock(ctx)
		require.NoError(t, err)
		time.Sleep(100 * time.Millisecond) // the key is tracked
		key := m.keys.lock
		r, open := rf.gate(func(cmd []string) bool { return len(cmd) > 1 && cmd[0] == "HGET" && cmd[1] == key }, 1, false)
		defer open()
		forced, err := other.Mutex(m.name).ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, forced)
		select {
		case <-r.Ran():
		case <-time.After(5 * time.Second):
			t.Fatal("the invalidation brought no read of the key")
		}
		seen.requireNoneAfterLoss(t, l, open)
		require.ErrorIs(t, l.Err(), ErrForceUnlocked)
	})
}
