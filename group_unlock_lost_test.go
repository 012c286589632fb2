package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A Group lost (one of its locks' fixed lease ran out) releases what it
// still holds at once; its Unlock afterwards returns ErrNotHeld with the
// loss, not nil: nil would say the group held its locks until then, while
// another owner may have taken them since.
func TestGroupUnlockAfterItsLossReportsTheLoss(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c := e.client(t)
		name := "{" + t.Name() + "}"
		lease := WithFixedLease(300 * time.Millisecond)
		g := NewGroup(c.Mutex(name+":a", lease), c.Mutex(name+":b", lease))
		gl := mustLock(t, ctx, g.Lock)
		select {
		case <-gl.Lost():
		case <-time.After(10 * time.Second):
			t.Fatal("the group's fixed lease ran out unreported")
		}
		require.ErrorIs(t, gl.Err(), ErrExpired)
		ol := mustLock(t, ctx, e.client(t).Mutex(name+":a").Lock)
		err := gl.Unlock(ctx)
		require.ErrorIs(t, err, ErrNotHeld)
		require.ErrorIs(t, err, ErrExpired)
		require.ErrorIs(t, gl.Unlock(ctx), ErrNotHeld, "a retry")
		require.NoError(t, ol.Unlock(ctx), "the group's Unlock released another owner's lock")
	})
}

// A Group lost because its renewals went unanswered until its deadline
// (ErrConnectionLost) releases what it still holds at once too, where the
// connection lets it: its Unlock afterwards reports the loss. The keys
// were released at the loss, not by that Unlock, and another owner may
// hold them since.
func TestGroupUnlockAfterItsConnectionLossReportsTheLoss(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c, rf := e.faultyClientDetecting(t, false, WithWatchdogLease(600*time.Millisecond))
		name := "{" + t.Name() + "}"
		g := NewGroup(c.Mutex(name+":a"), c.Mutex(name+":b"))
		gl := mustLock(t, ctx, g.Lock)
		// The renewals run in Redis; their replies never come back.
		rf.hold(runs(renewScript), -1, time.Minute)
		select {
		case <-gl.Lost():
		case <-time.After(10 * time.Second):
			t.Fatal("the group's loss was not reported")
		}
		require.ErrorIs(t, gl.Err(), ErrConnectionLost)
		ol := mustLock(t, ctx, e.client(t).Mutex(name+":a").Lock)
		err := gl.Unlock(ctx)
		require.ErrorIs(t, err, ErrNotHeld, "the Unlock reported a release that the loss made")
		require.ErrorIs(t, err, ErrConnectionLost)
		require.NoError(t, ol.Unlock(ctx), "the group's Unlock released another owner's lock")
	})
}

// A Group's Unlock while the release that followed its loss waits for
// Redis waits for that release only as long as its context and the grace
// of its call allow: it returns ctx's error (the outcome is unknown to it),
// and an Unlock once that release answered reports the loss.
func TestGroupUnlockWhileItsLossReleaseWaitsReturnsWithinGrace(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c, rf := e.faultyClientDetecting(t, false)
		name := "{" + t.Name() + "}"
		lease := WithFixedLease(300 * time.Millisecond)
		g := NewGroup(c.Mutex(name+":a", lease), c.Mutex(name+":b", lease))
		// The release after the loss runs in Redis; its reply is held.
		held, open := rf.gate(runs(groupReleaseScript), 1, false)
		defer open()
		gl := mustLock(t, ctx, g.Lock)
		select {
		case <-held.Ran():
		case <-time.After(10 * time.Second):
			t.Fatal("the group's loss released nothing")
		}
		require.ErrorIs(t, gl.Err(), ErrExpired)
		uctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := gl.Unlock(uctx)
		took := time.Since(start)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, took, 3*time.Second, "Unlock waited for the release after the loss past its context and grace")
		open()
		err = gl.Unlock(ctx)
		require.ErrorIs(t, err, ErrNotHeld)
		require.ErrorIs(t, err, ErrExpired)
		ol := mustLock(t, ctx, e.client(t).Mutex(name+":a").Lock)
		require.NoError(t, ol.Unlock(ctx))
	})
}
