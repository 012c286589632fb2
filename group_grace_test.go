package redisync

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// touches matches every call one of whose words is one of keys: the
// acquire script, the undo and the leave of a lock, all at once.
func touches(keys ...string) func(cmd []string) bool {
	return func(cmd []string) bool {
		for _, k := range keys {
			if slices.Contains(cmd, k) {
				return true
			}
		}
		return false
	}
}

// TestGroupReturnsWithinGraceWhileAMemberHangs: a Group's Lock, TryLock
// and Acquire whose member's acquire script ran but whose reply, and the
// replies of every call after it on that member's keys (the undo of the
// attempt, the leave of its place in the queue, the release of what the
// group took), are held back, return within the grace after their
// context is cancelled, on a group of one Client (one script) and on one
// that spans two Clients (its locks taken one at a time). Once the
// replies come, nothing is left held: another Client takes the group at
// once.
func TestGroupReturnsWithinGraceWhileAMemberHangs(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		c1, rf := e.faultyClient(t)
		c2 := e.client(t)
		other := e.client(t)
		shapes := []struct {
			name, short string
			group       func(n string) (*Group, *Mutex)
		}{
			{"one script", "script", func(n string) (*Group, *Mutex) {
				held := c1.Mutex("{" + n + "}:a")
				return NewGroup(held, c1.Mutex("{"+n+"}:b")), held
			}},
			{"one at a time", "ordered", func(n string) (*Group, *Mutex) {
				// The member of c1 is taken second, after one of c2.
				held := c1.Mutex(n + ":b")
				return NewGroup(c2.Mutex(n+":a"), held, c2.Mutex(n+":c")), held
			}},
		}
		forms := []struct {
			name string
			call func(ctx context.Context, g *Group) error
		}{
			{"Lock", func(ctx context.Context, g *Group) error { return locked(g.Lock(ctx)) }},
			{"TryLock", func(ctx context.Context, g *Group) error { return locked(g.TryLock(ctx)) }},
			{"Acquire", func(ctx context.Context, g *Group) error { return acquired(g.Acquire(ctx)) }},
		}
		for _, shape := range shapes {
			for _, form := range forms {
				t.Run(shape.name+"/"+form.name, func(t *testing.T) {
					n := "grace:" + shape.short + ":" + form.name
					g, held := shape.group(n)
					k := held.keys
					r := rf.hold(touches(k.lock, k.queue, k.waiters), -1, 20*time.Second)
					defer rf.clear()
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					errc := make(chan error, 1)
					go func() { errc <- form.call(ctx, g) }()
					select {
					case <-r.Ran():
					case <-time.After(10 * time.Second):
						t.Fatal("the member's acquire script did not run")
					}
					time.Sleep(100 * time.Millisecond)
					ended := time.Now()
					cancel()
					var err error
					select {
					case err = <-errc:
					case <-time.After(15 * time.Second):
						t.Fatal("the group's call did not return while its member's replies were held")
					}
					over := time.Since(ended)
					t.Logf("returned %v after its context ended: %v", over.Round(time.Millisecond), err)
					require.ErrorIs(t, err, context.Canceled)
					require.Less(t, over, deadlineOverrun, "returned %v after its context ended", over.Round(time.Millisecond))
					rf.clear()
					lctx, lcancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer lcancel()
					l, err := NewGroup(other.Mutex(g.ms[0].name), other.Mutex(g.ms[1].name)).TryLock(lctx)
					for err != nil && lctx.Err() == nil {
						// What the call left in flight is undone once its
						// replies came, beside the caller.
						time.Sleep(50 * time.Millisecond)
						l, err = NewGroup(other.Mutex(g.ms[0].name), other.Mutex(g.ms[1].name)).TryLock(lctx)
					}
					require.NoError(t, err)
					require.NoError(t, l.Unlock(lctx))
				})
			}
		}
	})
}

// TestGroupOverClientsEndsAtDeadlineWhileServerPaused: a Group over two
// Clients (its locks taken one at a time, its fencing counters raised
// after) returns at most inflightGrace (and a margin) after its context
// ended while the server pauses every client, its connections closed just
// before so that the calls open new ones; once the server answers again
// nothing of the locks is left.
func TestGroupOverClientsEndsAtDeadlineWhileServerPaused(t *testing.T) {
	e := ownServer(t)
	a, b := e.client(t), e.renewalClient(t)
	partner := map[*Client]*Client{a: b, b: a}
	group := func(c *Client, n string) *Group { return NewGroup(c.Mutex(n+":a"), partner[c].Mutex(n+":b")) }
	calls := []blockingCall{
		{"Group.Lock", nil, func(ctx context.Context, c *Client, n string) error { return locked(group(c, n).Lock(ctx)) }},
		{"Group.TryLock", nil, func(ctx context.Context, c *Client, n string) error { return locked(group(c, n).TryLock(ctx)) }},
		{"Group.Acquire", nil, func(ctx context.Context, c *Client, n string) error { return acquired(group(c, n).Acquire(ctx)) }},
	}
	requireCallsEndAtDeadline(t, e, []stalledClient{{"dial", a}, {"new", b}}, calls, func() {
		_, err := e.server.Do("CLIENT", "KILL", "TYPE", "normal")
		require.NoError(t, err)
		_, err = e.server.Do("CLIENT", "PAUSE", "3000", "ALL")
		require.NoError(t, err)
	})
}
