package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A Group taken one lock at a time (its locks on two Clients) with the
// Context of a Mutex lease that was passed on locally re-enters that lock
// with the lease's own token: the group's token is above every earlier
// holder's, the goroutine that passed the lock on included.
func TestGroupInOrderReentersPassedOnLeaseWithItsToken(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		c1, c2 := e.client(t), e.client(t)
		// The other lock's counter is behind: its next token comes before
		// the passed-on lock's tokens, which makes the re-entered lock's
		// token the group's.
		other := c2.Mutex(t.Name() + ":b")
		warm(t, ctx, other)
		m := c1.Mutex(t.Name()+":a", WithLocalPasses(DefaultLocalPasses, time.Minute))
		warm(t, ctx, m)
		first := mustLock(t, ctx, m.Lock)
		_, leases, _ := holdAndQueueFrom(t, ctx, m, first, 1)
		firstToken := first.Token()
		require.NoError(t, first.Unlock(ctx))
		passed := <-leases
		require.NoError(t, passed.Err())
		require.Same(t, first.h, passed.h, "the lock was not passed on locally")
		require.Greater(t, passed.Token(), firstToken)

		g := NewGroup(m, other)
		require.False(t, g.atomic)
		gl := mustLock(t, passed.Context(), g.Lock)
		require.Greater(t, gl.Token(), firstToken, "the group's token must be above the holder that passed the lock on")
		require.GreaterOrEqual(t, gl.Token(), passed.Token())
		require.NoError(t, gl.Unlock(ctx))
		require.NoError(t, passed.Unlock(ctx))

		// Every later ownership of either name comes after the group.
		for _, mu := range []*Mutex{e.client(t).Mutex(m.name), e.client(t).Mutex(other.name)} {
			l := mustLock(t, ctx, mu.Lock)
			require.Greater(t, l.Token(), gl.Token())
			require.NoError(t, l.Unlock(ctx))
		}
	})
}

// reentrant is a kind of native lock that a lease's Context re-enters.
// group marks a Mutex re-entered through a Group of one slot (one script).
// forced is the loss a forced unlock is reported as (nil: ErrForceUnlocked;
// the RWMutex does not tell it from an expiry).
type reentrant struct {
	name   string
	group  bool
	forced error
	handle func(c *Client, name string) nativeLock
}

// nativeLock is a native lock of one name: its acquisitions, its forced
// unlock, and whether it is held.
type nativeLock struct {
	lock, try func(context.Context) (*Lease, error)
	force     func(context.Context) (bool, error)
	locked    func(context.Context) (bool, error)
}

var nativeReentrants = []reentrant{
	{name: "Mutex", handle: func(c *Client, name string) nativeLock {
		m := c.Mutex(name)
		return nativeLock{m.Lock, m.TryLock, m.ForceUnlock, func(ctx context.Context) (bool, error) {
			st, err := m.Inspect(ctx)
			return st.Locked, err
		}}
	}},
	{name: "FairMutex", handle: func(c *Client, name string) nativeLock {
		m := c.FairMutex(name)
		return nativeLock{m.Lock, m.TryLock, m.ForceUnlock, func(ctx context.Context) (bool, error) {
			st, err := m.Inspect(ctx)
			return st.Locked, err
		}}
	}},
}

func init() {
	nativeReentrants = append(nativeReentrants, reentrant{name: "RWMutex", forced: ErrExpired,
		handle: func(c *Client, name string) nativeLock {
			m := c.RWMutex(name)
			return nativeLock{m.Lock, m.TryLock, m.ForceUnlock, func(ctx context.Context) (bool, error) {
				st, err := m.Inspect(ctx)
				return st.WriteLocked, err
			}}
		}})
	g := nativeReentrants[0]
	g.name, g.group = "Group", true
	nativeReentrants = append(nativeReentrants, g)
}

// A re-entry claims its parent's ownership as Redis has it: after a forced
// unlock, an expiry, or another owner's acquisition that the parent's
// Client has not noticed (a Client that notices losses at renewals), the
// re-entry is refused with the parent's loss, which the parent then
// reports; it never takes the lock afresh under the parent's owner id.
func TestReentryAfterUnnoticedLossIsRefused(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		for _, k := range nativeReentrants {
			t.Run(k.name, func(t *testing.T) {
				ctx := withTimeout(t, 30*time.Second)
				c := e.renewalClient(t)
				rc := e.rueidisClient(t)
				// forceUnlock force-unlocks name through another Client,
				// whose lock of name it returns.
				forceUnlock := func(t *testing.T, name string) nativeLock {
					other := k.handle(e.client(t), name)
					found, err := other.force(ctx)
					require.NoError(t, err)
					require.True(t, found)
					return other
				}
				for _, tc := range []struct {
					name string
					// lose ends the parent's ownership behind its Client's
					// back; other is a lease another Client holds after it,
					// if any.
					lose func(t *testing.T, name string, parent *Lease) (other *Lease)
					want error
				}{
					{"forced, free", func(t *testing.T, name string, _ *Lease) *Lease {
						forceUnlock(t, name)
						return nil
					}, ErrForceUnlocked},
					{"forced, taken and released by another Client", func(t *testing.T, name string, _ *Lease) *Lease {
						ol := mustLock(t, ctx, forceUnlock(t, name).lock)
						require.NoError(t, ol.Unlock(ctx))
						return nil
					}, ErrForceUnlocked},
					{"forced, held by another Client", func(t *testing.T, name string, _ *Lease) *Lease {
						return mustLock(t, ctx, forceUnlock(t, name).lock)
					}, ErrForceUnlocked},
					{"expired", func(t *testing.T, name string, p *Lease) *Lease {
						require.NoError(t, rc.Do(ctx, rc.B().Del().Key(p.h.keys.lock).Build()).Error())
						return nil
					}, ErrExpired},
				} {
					for _, how := range []string{"TryLock", "Lock"} {
						t.Run(tc.name+"/"+how, func(t *testing.T) {
							name := "{" + t.Name() + "}"
							h := k.handle(c, name)
							lock, try, locked := h.lock, h.try, h.locked
							if k.group {
								// With a lock of the same slot that is free.
								g := NewGroup(c.Mutex(name), c.Mutex(name+":b"))
								require.True(t, g.atomic)
								try = g.TryLock
								defer func() {
									st, err := c.Mutex(name + ":b").Inspect(ctx)
									require.NoError(t, err)
									require.False(t, st.Locked, "the refused group took its other lock")
								}()
							}
							parent := mustLock(t, ctx, lock)
							other := tc.lose(t, name, parent)
							require.NoError(t, parent.Err(), "the Client noticed the loss before the re-entry")
							reenter, relock := try, lock
							if k.group {
								relock = NewGroup(c.Mutex(name), c.Mutex(name+":b")).Lock
							}
							// TryLock with the parent's Context, which the
							// parent's loss cancels; Lock with a context that
							// does not carry that cancellation: a refused
							// re-entry ends at once all the same, it never
							// waits.
							rctx, cancel := context.WithCancel(parent.Context())
							if how == "Lock" {
								reenter = relock
								rctx, cancel = context.WithTimeout(context.WithoutCancel(parent.Context()), 10*time.Second)
							}
							defer cancel()
							l, err := reenter(rctx)
							require.Nil(t, l)
							require.ErrorIs(t, err, ErrNotHeld)
							want := tc.want
							if want == ErrForceUnlocked && k.forced != nil {
								want = k.forced
							}
							require.ErrorIs(t, err, want)
							if how == "Lock" {
								require.NoError(t, rctx.Err(), "the re-entry waited")
							}
							require.ErrorIs(t, parent.Err(), want, "the parent's loss is reported")
							select {
							case <-parent.Lost():
							default:
								t.Fatal("the parent's Lost is open")
							}
							held, err := locked(ctx)
							require.NoError(t, err)
							require.Equal(t, other != nil, held, "the re-entry took the lock")
							if other != nil {
								require.NoError(t, other.Unlock(ctx))
							}
						})
					}
				}
			})
		}
	})
}

// TestConcurrentUnlocksOfOneOwnership: a lease and its re-entry (or a
// Group member that re-entered it) unlocked at once. The release of the
// first runs in Redis, and its reply is held back; the second's release
// then frees the lock. Its reply must not report the first lease lost
// (its hold was released, by its own Unlock still on its way): that
// Unlock returns nil, Lost stays open, and once both returned the Client
// renews nothing for the ownership. Both orders, for a re-entry and for a
// Group over the lease's Context.
func TestConcurrentUnlocksOfOneOwnership(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c, rf := e.faultyClient(t)
		for _, tc := range []struct {
			what        string
			group       bool
			reentryHeld bool // the re-entry's release is the one held back
			// lost: the first release's reply is lost once the other
			// freed the lock. Its Unlock returns the error, and the
			// lease, whose hold Redis no longer has, is lost once no
			// release is on its way; a retried Unlock finds its release
			// landed (see Lease.Unlock).
			lost bool
		}{
			{"re-entry, outer held back", false, false, false},
			{"re-entry, re-entry held back", false, true, false},
			{"group, outer held back", true, false, false},
			{"outer's reply lost", false, false, true},
		} {
			t.Run(tc.what, func(t *testing.T) {
				m := c.Mutex(t.Name())
				l := mustLock(t, ctx, m.Lock)
				var inner *Lease
				if tc.group {
					other := c.Mutex(t.Name() + ":other")
					inner = mustLock(t, l.Context(), NewGroup(m, other).Lock)
				} else {
					inner = mustLock(t, l.Context(), m.Lock)
				}
				first, second := l, inner
				if tc.reentryHeld {
					first, second = inner, l
				}
				r, open := rf.gate(runsWith(releaseScript, first.hold), 1, tc.lost)
				defer open()
				done := make(chan error, 1)
				go func() { done <- first.Unlock(ctx) }()
				select {
				case <-r.Ran():
				case <-time.After(5 * time.Second):
					t.Fatal("the first release did not run")
				}
				require.NoError(t, second.Unlock(ctx))
				select {
				case <-first.Lost():
					t.Fatalf("a lease whose release is on its way reported lost once the other hold's release freed the lock: %v", first.Err())
				case <-time.After(300 * time.Millisecond):
				}
				open()
				if tc.lost {
					require.Error(t, <-done)
					select {
					case <-first.Lost():
					case <-time.After(5 * time.Second):
						t.Fatal("a lease whose hold is gone in Redis was not reported lost")
					}
					require.ErrorIs(t, first.Err(), ErrExpired)
					require.NoError(t, first.Unlock(ctx), "the retry finds its release landed")
				} else {
					require.NoError(t, <-done)
					select {
					case <-first.Lost():
						t.Fatalf("Lost closed for a lease whose Unlock returned nil: %v", first.Err())
					default:
					}
				}
				st, err := m.Inspect(ctx)
				require.NoError(t, err)
				require.False(t, st.Locked)
				c.watchdog.mu.Lock()
				n := len(c.watchdog.holders)
				c.watchdog.mu.Unlock()
				require.Zero(t, n, "the Client still renews an ownership whose leases all ended")
			})
		}
	})
}
