package redisync

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLeaseExtend: Extend gives a held fixed lease of every kind its new
// length in Redis and in Deadline, and the lock stays held past the end of
// the lease it was acquired with.
func TestLeaseExtend(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		admin := e.rueidisClient(t)
		const lease, extended = 500 * time.Millisecond, 3 * time.Second
		name := t.Name()
		sem := c.Semaphore(name, WithFixedLease(lease))
		_, err := sem.SetSize(ctx, 1)
		require.NoError(t, err)
		t.Cleanup(func() { sem.Delete(context.Background()) })
		m := c.Mutex(name+":m", WithFixedLease(lease))
		f := c.FairMutex(name+":f", WithFixedLease(lease))
		rw := c.RWMutex(name+":rw", WithFixedLease(lease))
		rwRead := c.RWMutex(name+":rwr", WithFixedLease(lease))
		for _, tc := range []struct {
			what string
			lock func(context.Context) (*Lease, error)
			key  string
		}{
			{"Mutex", m.Lock, m.keys.lock},
			{"FairMutex", f.Lock, f.keys.lock},
			{"RWMutex write", rw.Lock, rw.keys.lock},
			{"RWMutex read", rwRead.RLock, rwRead.keys.readers},
			{"Semaphore", func(ctx context.Context) (*Lease, error) { return sem.Lock(ctx, 1) }, sem.keys.holders},
		} {
			t.Run(tc.what, func(t *testing.T) {
				l := mustLock(t, ctx, tc.lock)
				before, ok := l.Deadline()
				require.True(t, ok)
				require.NoError(t, l.Extend(ctx, extended))
				after, ok := l.Deadline()
				require.True(t, ok)
				require.True(t, after.After(before), "Deadline did not move: %v, then %v", before, after)
				pttl, err := admin.Do(ctx, admin.B().Pttl().Key(tc.key).Build()).AsInt64()
				require.NoError(t, err)
				require.Greater(t, time.Duration(pttl)*time.Millisecond, lease, "the key kept its first lease")
				time.Sleep(lease + lease/2)
				require.NoError(t, l.Err(), "lost after the lease it was acquired with")
				require.NoError(t, l.Unlock(ctx))
			})
		}
	})
}

// TestLeaseExtendRefusesLostLock: on a Client that learns of changes only
// at renewals, Extend of a lease whose lock was deleted, taken or
// force-unlocked behind it extends nothing, reports the lease lost with
// the reason, and returns ErrNotHeld.
func TestLeaseExtendRefusesLostLock(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.renewalClient(t)
		admin := e.rueidisClient(t)
		other := e.client(t)
		for _, tc := range []struct {
			what   string
			change func(m *Mutex) error
			reason error
			// ttl checks the lock key's TTL after Extend: not an hour.
			ttl func(t *testing.T, pttl time.Duration)
		}{
			{"deleted", func(m *Mutex) error { return admin.Do(ctx, admin.B().Del().Key(m.keys.lock).Build()).Error() }, ErrExpired,
				func(t *testing.T, pttl time.Duration) { require.Equal(t, -2*time.Millisecond, pttl, "the key is back") }},
			{"taken", func(m *Mutex) error {
				return admin.Do(ctx, admin.B().Hset().Key(m.keys.lock).FieldValue().FieldValue("owner", "someone:1").Build()).Error()
			}, ErrTakenOver, func(t *testing.T, pttl time.Duration) {
				require.LessOrEqual(t, pttl, time.Minute, "the other owner's lock was extended")
			}},
			{"force-unlocked", func(m *Mutex) error { _, err := other.Mutex(m.name).ForceUnlock(ctx); return err }, ErrForceUnlocked,
				func(t *testing.T, pttl time.Duration) {
					// A free lock's hash keeps the fence retention.
					require.Equal(t, defaultFenceRetention, pttl.Round(time.Hour), "the free lock's expiry")
				}},
		} {
			t.Run(tc.what, func(t *testing.T) {
				m := c.Mutex(t.Name(), WithFixedLease(time.Minute))
				t.Cleanup(func() { admin.Do(context.Background(), admin.B().Del().Key(m.keys.lock).Build()) })
				l := mustLock(t, ctx, m.Lock)
				require.NoError(t, tc.change(m))
				err := l.Extend(ctx, time.Hour)
				require.ErrorIs(t, err, ErrNotHeld)
				require.ErrorIs(t, err, tc.reason)
				require.ErrorIs(t, l.Err(), tc.reason)
				select {
				case <-l.Lost():
				default:
					t.Fatal("Lost not closed")
				}
				pttl, err := admin.Do(ctx, admin.B().Pttl().Key(m.keys.lock).Build()).AsInt64()
				require.NoError(t, err)
				tc.ttl(t, time.Duration(pttl)*time.Millisecond)
				require.ErrorIs(t, l.Extend(ctx, time.Hour), ErrNotHeld, "a lost lease, again")
			})
		}
	})
}

// TestLeaseExtendRejectsBadInput: Extend refuses what it cannot do with
// ErrInvalidArgument, and a lease that does not hold with ErrNotHeld,
// leaving the lease as it was.
func TestLeaseExtendRejectsBadInput(t *testing.T) {
	e := standaloneEnv(t)
	ctx := context.Background()
	c := e.client(t)
	fixed := mustLock(t, ctx, c.Mutex(t.Name()+":fixed", WithFixedLease(time.Minute)).Lock)
	for _, d := range []time.Duration{0, -time.Second, time.Microsecond} {
		require.ErrorIs(t, fixed.Extend(ctx, d), ErrInvalidArgument, "d %v", d)
	}
	var nilCtx context.Context
	require.ErrorIs(t, fixed.Extend(nilCtx, time.Minute), ErrInvalidArgument) //nolint:staticcheck // a nil context on purpose
	require.NoError(t, fixed.Err())

	for what, l := range map[string]*Lease{
		"watchdog lease": mustLock(t, ctx, c.Mutex(t.Name()+":watchdog").Lock),
		"renewed lease":  mustLock(t, ctx, c.Mutex(t.Name()+":renewed", WithRenewedLease(time.Minute)).Lock),
		"group lease":    mustLock(t, ctx, NewGroup(c.Mutex(t.Name()+":g", WithFixedLease(time.Minute))).Lock),
	} {
		require.ErrorIs(t, l.Extend(ctx, time.Minute), ErrInvalidArgument, what)
		require.NoError(t, l.Err(), what)
		require.NoError(t, l.Unlock(ctx), what)
	}

	require.NoError(t, fixed.Unlock(ctx))
	err := fixed.Extend(ctx, time.Minute)
	require.ErrorIs(t, err, ErrNotHeld)
	require.ErrorIs(t, err, ErrReleased)
	var none *Lease
	require.ErrorIs(t, none.Extend(ctx, time.Minute), ErrNotHeld)
}

// TestLeaseExtendReplyLost: an Extend whose reply is lost, or held back
// past its ctx, after its script ran may have set the lock's new end. A
// shorter one brings the end closer in Redis: the lease's Deadline comes
// as close, and the lease is reported expired then, before another Client
// can take the lock. A longer one leaves the lease's end where it was.
func TestLeaseExtendReplyLost(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c, rf := e.faultyClient(t)
		other := e.client(t)
		const lease, shorter = 5 * time.Second, 300 * time.Millisecond
		for _, fault := range []string{"lost", "held"} {
			t.Run(fault, func(t *testing.T) {
				m := c.Mutex(t.Name(), WithFixedLease(lease))
				l := mustLock(t, ctx, m.Lock)
				before, _ := l.Deadline()

				// Longer: the lease keeps its end.
				if fault == "lost" {
					rf.lose(extensionCall(2*lease), 1, 0)
				} else {
					rf.hold(extensionCall(2*lease), 1, time.Second)
				}
				ectx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				require.Error(t, l.Extend(ectx, 2*lease))
				cancel()
				after, _ := l.Deadline()
				require.Equal(t, before, after, "a longer extension whose reply did not come moved Deadline")

				// Shorter: the end comes closer.
				if fault == "lost" {
					rf.lose(extensionCall(shorter), 1, 0)
				} else {
					rf.hold(extensionCall(shorter), 1, time.Second)
				}
				sent := time.Now()
				ectx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
				require.Error(t, l.Extend(ectx, shorter))
				cancel()
				dl, ok := l.Deadline()
				require.True(t, ok)
				require.False(t, dl.After(sent.Add(shorter)), "Deadline %v after the shorter end the script may have set", dl.Sub(sent))
				select {
				case <-l.Lost():
				case <-time.After(5 * time.Second):
					t.Fatal("the lease was not reported expired")
				}
				require.ErrorIs(t, l.Err(), ErrExpired)
				// The lock expired in Redis with the shorter end.
				l2 := mustLock(t, ctx, other.Mutex(t.Name(), WithFixedLease(lease)).Lock)
				require.NoError(t, l2.Unlock(ctx))
				require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
			})
		}
		// A longer extension whose reply comes after a shorter one that
		// ran after it: the lock ends as the shorter one set, and so does
		// the lease.
		t.Run("superseded", func(t *testing.T) {
			m := c.Mutex(t.Name(), WithFixedLease(lease))
			l := mustLock(t, ctx, m.Lock)
			r, open := rf.gate(extensionCall(2*lease), 1, false)
			defer open()
			done := make(chan error, 1)
			go func() { done <- l.Extend(ctx, 2*lease) }()
			<-r.Ran()
			sent := time.Now()
			require.NoError(t, l.Extend(ctx, shorter))
			open()
			require.NoError(t, <-done)
			dl, _ := l.Deadline()
			require.False(t, dl.After(sent.Add(shorter)), "Deadline %v after the end the later extension set", dl.Sub(sent))
			select {
			case <-l.Lost():
			case <-time.After(5 * time.Second):
				t.Fatal("the lease was not reported expired")
			}
			l2 := mustLock(t, ctx, other.Mutex(t.Name(), WithFixedLease(lease)).Lock)
			require.NoError(t, l2.Unlock(ctx))
		})
		// While the shorter extension's reply is on its way, the lock may
		// end with it already: the lease ends then, not at its old end.
		t.Run("in flight", func(t *testing.T) {
			m := c.Mutex(t.Name(), WithFixedLease(lease))
			l := mustLock(t, ctx, m.Lock)
			r, open := rf.gate(extensionCall(shorter), 1, false)
			defer open()
			sent := time.Now()
			done := make(chan error, 1)
			go func() { done <- l.Extend(ctx, shorter) }()
			<-r.Ran()
			dl, _ := l.Deadline()
			require.False(t, dl.After(sent.Add(shorter)), "Deadline %v after the end the script set", dl.Sub(sent))
			select {
			case <-l.Lost():
			case <-time.After(5 * time.Second):
				t.Fatal("the lease was not reported expired while its extension's reply was held")
			}
			l2 := mustLock(t, ctx, other.Mutex(t.Name(), WithFixedLease(lease)).Lock)
			open()
			require.ErrorIs(t, <-done, ErrNotHeld, "the extension's reply came after the lease ran out")
			require.NoError(t, l2.Unlock(ctx))
		})
	})
}

// TestLeaseExtendOnItsWayAtTheEnd: an Extend sent just before its fixed
// lease ends, whose reply comes after the lease ran out or never comes,
// may have given the lock a new end in Redis, long after the lease's,
// that no lease of the Client holds. The lease is reported expired at its
// own end all the same, and the lock is released then: another Client
// takes it then, not when the extension would end. Re-entries of the
// ownership go with it.
func TestLeaseExtendOnItsWayAtTheEnd(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c, rf := e.faultyClient(t)
		other := e.client(t)
		const lease, longer = 600 * time.Millisecond, 30 * time.Second
		extension := extensionCall(longer)
		type lockOf func(c *Client, name string) func(context.Context) (*Lease, error)
		mutex := func(c *Client, name string) func(context.Context) (*Lease, error) {
			return c.Mutex(name, WithFixedLease(lease)).Lock
		}
		for _, kind := range []struct {
			what string
			lock lockOf
		}{
			{"Mutex", mutex},
			{"FairMutex", func(c *Client, name string) func(context.Context) (*Lease, error) {
				return c.FairMutex(name, WithFixedLease(lease)).Lock
			}},
			{"RWMutex write", func(c *Client, name string) func(context.Context) (*Lease, error) {
				return c.RWMutex(name, WithFixedLease(lease)).Lock
			}},
			{"Semaphore", func(c *Client, name string) func(context.Context) (*Lease, error) {
				s := c.Semaphore(name, WithFixedLease(lease))
				_, err := s.SetSize(ctx, 1)
				require.NoError(t, err)
				t.Cleanup(func() { s.Delete(context.Background()) })
				return func(ctx context.Context) (*Lease, error) { return s.Lock(ctx, 1) }
			}},
			{"Mutex re-entered", mutex},
		} {
			for _, fault := range []string{"held", "lost"} {
				t.Run(kind.what+"/"+fault, func(t *testing.T) {
					l := mustLock(t, ctx, kind.lock(c, t.Name()))
					var re *Lease
					if kind.what == "Mutex re-entered" {
						re = mustLock(t, l.Context(), kind.lock(c, t.Name()))
					}
					dl, _ := l.Deadline()
					// Sent just before the end, as late as a caller may.
					time.Sleep(time.Until(dl) - 50*time.Millisecond)
					done := make(chan error, 1)
					if fault == "held" {
						r, open := rf.gate(extension, 1, false)
						defer open()
						go func() { done <- l.Extend(ctx, longer) }()
						select {
						case <-r.Ran():
						case <-time.After(5 * time.Second):
							t.Fatal("the extension did not run")
						}
						select {
						case <-l.Lost():
						case <-time.After(5 * time.Second):
							t.Fatal("the lease was not reported expired while its extension's reply was held")
						}
						open()
					} else {
						rf.lose(extension, 1, 0)
						go func() { done <- l.Extend(ctx, longer) }()
					}
					err := <-done
					require.Error(t, err)
					select {
					case <-l.Lost():
					case <-time.After(5 * time.Second):
						t.Fatal("the lease was not reported expired")
					}
					require.ErrorIs(t, l.Err(), ErrExpired)
					if re != nil {
						require.ErrorIs(t, re.Err(), ErrExpired)
					}
					// Well before the extension's end.
					lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					defer cancel()
					l2, err := kind.lock(other, t.Name())(lctx)
					require.NoError(t, err, "the lock stayed held after the lease ran out, as the extension set it")
					require.NoError(t, l2.Unlock(ctx))
					require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
				})
			}
		}
	})
}

// extensionCall matches an Extend's call by d: a renewal script (of any
// kind) given the extension's length, which no watchdog renewal of a fixed
// lease sends.
func extensionCall(d time.Duration) func([]string) bool {
	ms := strconv.FormatInt(d.Milliseconds(), 10)
	return func(cmd []string) bool {
		a := scriptArgs(cmd)
		return len(a) == 2 && a[1] == ms
	}
}
