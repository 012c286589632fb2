package redisync

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// freeSilently frees a lock as a release does, but publishes nothing: no
// waiter is told.
const freeSilently = `return redis.call('HSET', KEYS[1], 'owner', '', 'holds', '')`

// killCommandConns closes, on every master of the env, the connections of
// Client c (given WithClientName, so that CLIENT LIST names them) that
// subscribe to nothing: what its presence pass reads from its
// client-side cache was read on them, and an invalidation on its way there
// is lost with them. It returns how many it closed.
func (e *env) killCommandConns(t testing.TB, c *Client) int {
	t.Helper()
	n := 0
	for _, s := range e.masters() {
		for _, l := range lines(t, s, "CLIENT", "LIST") {
			f := clientListFields(l)
			if !strings.HasPrefix(f["name"], "redisync:"+c.ID()+":") || f["sub"] != "0" || f["psub"] != "0" || (f["ssub"] != "" && f["ssub"] != "0") {
				continue
			}
			if _, err := s.Do("CLIENT", "KILL", "ID", f["id"]); err == nil {
				n++
			}
		}
	}
	return n
}

// clientListFields splits a line of CLIENT LIST into its fields.
func clientListFields(line string) map[string]string {
	f := make(map[string]string)
	for _, kv := range strings.Fields(line) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			f[k] = v
		}
	}
	return f
}

// TestWaiterLearnsOfAFreeLockAfterItsConnectionBroke: a Client that reads
// the locks it waits for from its client-side cache does not trust what it
// read on a connection that broke, whose invalidations are lost with it.
// The lock is freed after the break without any message: the waiter's
// next presence pass asks Redis, finds it free and the waiter takes it;
// no fallback ends the wait, and the subscription stays up throughout.
func TestWaiterLearnsOfAFreeLockAfterItsConnectionBroke(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		rc := e.rueidisClient(t)
		var fell atomic.Int64
		holder := e.client(t, WithWatchdogLease(time.Minute))
		waiting := e.client(t, fallbacks(&fell), WithClientName("waiter"))
		require.Equal(t, DetectOnChange, waiting.LossDetection())
		name := "broken:" + t.Name()
		keys := holder.keysFor(name)
		l, err := holder.Mutex(name).Lock(ctx)
		require.NoError(t, err)
		w := lockAsync(ctx, waiting.Mutex(name, WithLocalPasses(0, 0)))
		awaitQueued(t, ctx, rc, keys, 1)
		awaitSubscriptionReady(t, waiting, waiterChannel(keys.channel, waiting.ID()))
		time.Sleep(1500 * time.Millisecond) // a pass read the lock held, into the cache

		require.Positive(t, e.killCommandConns(t, waiting), "no command connection of the waiting Client")
		require.NoError(t, rc.Do(ctx, rc.B().Eval().Script(freeSilently).Numkeys(1).Key(keys.lock).Build()).Error())
		lockedWithin(t, ctx, w, 5*time.Second, "a waiter whose connection broke still trusts the holder it read before",
			"the waiter took the lock %v after it was freed silently", time.Now())
		<-l.Lost()
		require.Zero(t, fell.Load(), "waits ended by the fallback")
	})
}

// TestWaiterOfALapsedClientQueuesAgain: a Client whose presence lapses
// for longer than the waiter expiry (on standalone its connection is held
// up; on Cluster its passes stall) has its waiter's place dropped by the
// release that comes meanwhile, which hands the lock past it. Once the
// Client is back, its next pass finds its place gone, and the waiter
// queues again: it gets the lock from the next release, by its message.
func TestWaiterOfALapsedClientQueuesAgain(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := withTimeout(t, 30*time.Second)
		rc := e.rueidisClient(t)
		const expiry = 3 * time.Second
		const pause = 4500 * time.Millisecond // past the waiter expiry
		var lapsed *Client
		var lapse func()
		if e.cluster == nil {
			p, opt := e.te().Proxy(t)
			opt.DisableCache = false // the Client reads the lock from its cache
			lapsed = dialWith(t, opt)
			t.Cleanup(p.Heal)
			lapse = func() { p.Pause(pause) }
		} else {
			lapsed = e.client(t)
			lapse = func() {
				lapsed.presence.stall.Lock()
				time.AfterFunc(pause, lapsed.presence.stall.Unlock)
			}
		}
		require.Equal(t, DetectOnChange, lapsed.LossDetection())
		holder, other := e.client(t), e.client(t)
		name := "lapse:" + t.Name()
		keys := holder.keysFor(name)
		l, err := holder.Mutex(name).Lock(ctx)
		require.NoError(t, err)
		w := lockAsync(ctx, lapsed.Mutex(name, WithLocalPasses(0, 0), WithWaiterExpiry(expiry)))
		awaitQueued(t, ctx, rc, keys, 1)
		awaitSubscriptionReady(t, lapsed, waiterChannel(keys.channel, lapsed.ID()))
		time.Sleep(1500 * time.Millisecond) // settled: a pass renewed the place
		next := lockAsync(ctx, other.Mutex(name, WithLocalPasses(0, 0)))
		awaitQueued(t, ctx, rc, keys, 2)

		lapse()
		back := time.Now().Add(pause)
		time.Sleep(pause - time.Second) // the lapsed Client's deadline passed
		require.NoError(t, l.Unlock(ctx))
		o := <-next
		require.NoError(t, o.err, "the lock was not handed past the lapsed Client")
		select {
		case o := <-w:
			t.Fatalf("the lapsed Client's waiter got the lock (err %v) while the other Client holds it", o.err)
		default:
		}
		// Back, the lapsed Client's waiter queues again within a pass or two.
		eventually(t, time.Until(back)+3*time.Second, func() bool {
			ids, err := rc.Do(ctx, rc.B().Zrange().Key(keys.queue).Min("0").Max("-1").Build()).AsStrSlice()
			if err != nil {
				return false
			}
			for _, id := range ids {
				if strings.HasPrefix(id, lapsed.ID()+":") {
					return true
				}
			}
			return false
		}, "the lapsed Client's waiter did not queue again")
		t.Logf("queued again %v after the lapse ended", time.Since(back).Round(time.Millisecond))
		require.NoError(t, o.l.Unlock(ctx))
		lockedWithin(t, ctx, w, 3*time.Second, "the lapsed Client's waiter did not get the lock from the release after it queued again",
			"the lapsed Client's waiter took the lock %v after the release", time.Now())
	})
}

// TestWaiterAfterRestartTakesTheFreeLock: a server restart (without
// persistence: every key is gone) frees the lock a Client read as held
// into its client-side cache. The broken connections drop what it read:
// the waiter takes the lock within a pass of the server's return, not at
// the end of the holder's lease.
func TestWaiterAfterRestartTakesTheFreeLock(t *testing.T) {
	e, holder, waiting, done := restartPair(t, time.Minute)
	ctx := withTimeout(t, 30*time.Second)
	name := "restart-cache"
	l, err := holder.Mutex(name).Lock(ctx)
	require.NoError(t, err)
	w := lockAsync(ctx, waiting.Mutex(name, WithLocalPasses(0, 0)))
	rc := e.rueidisClient(t)
	awaitQueued(t, ctx, rc, holder.keysFor(name), 1)
	time.Sleep(1500 * time.Millisecond) // a pass read the lock held, into the cache

	require.NoError(t, e.server.Restart())
	lockedWithin(t, ctx, w, 5*time.Second, "a waiter still waits 5s after a restart freed the lock",
		"the waiter took the lock %v after the restart", time.Now())
	requireLost(t, l, 10*time.Second, ErrExpired, ErrConnectionLost, ErrTakenOver)
	done()
}

// TestDeadHeadCostsTheClaimWindow: a release hands the lock to the head of
// the queue, a waiter whose Client is dead (standalone: its network
// silent; Cluster: its Client stuck, its watchdog held), well within the
// default waiter expiry of 24 s, so that its place is still alive. The
// lock is its own only for the claim window, which its Client would have
// renewed: the next waiter, of another Client, gets the lock once that
// has passed, about 3 s after the release, not 24. Mutex and FairMutex.
func TestDeadHeadCostsTheClaimWindow(t *testing.T) {
	kinds := []struct {
		name string
		keys func(c *Client, name string) lockKeys
		lock func(c *Client, name string) func(context.Context) (*Lease, error)
	}{
		{"Mutex", (*Client).keysFor, func(c *Client, name string) func(context.Context) (*Lease, error) {
			return c.Mutex(name, WithLocalPasses(0, 0)).Lock
		}},
		{"FairMutex", (*Client).fairKeysFor, func(c *Client, name string) func(context.Context) (*Lease, error) {
			return c.FairMutex(name).Lock
		}},
	}
	eachEnv(t, func(t *testing.T, e *env) {
		for _, kind := range kinds {
			t.Run(kind.name, func(t *testing.T) {
				ctx := withTimeout(t, 30*time.Second)
				rc := e.rueidisClient(t)
				holder, next := e.client(t), e.client(t)
				var dead *Client
				var die func() (back func())
				if e.cluster == nil {
					var p interface {
						Blackhole()
						Heal()
					}
					dead, p = e.proxied(t)
					die = func() func() { p.Blackhole(); return p.Heal }
				} else {
					dead = e.client(t)
					die = func() func() { return dead.stallWatchdog() }
				}
				name := "dead-head:" + t.Name()
				keys := kind.keys(holder, name)
				l, err := kind.lock(holder, name)(ctx)
				require.NoError(t, err)
				dctx, dcancel := context.WithCancel(ctx)
				first := acquireAsync(dctx, kind.lock(dead, name))
				awaitQueued(t, ctx, rc, keys, 1)
				second := acquireAsync(ctx, kind.lock(next, name))
				awaitQueued(t, ctx, rc, keys, 2)
				awaitSubscriptionReady(t, next, waiterChannel(keys.channel, next.ID()))
				time.Sleep(1500 * time.Millisecond) // a pass of each Client read the lock

				back := die()
				require.NoError(t, l.Unlock(ctx)) // hands the lock to the dead waiter
				released := time.Now()
				o := <-second
				took := time.Since(released)
				back()
				dcancel()
				if f := <-first; f.err == nil {
					_ = f.l.Unlock(context.WithoutCancel(ctx))
				}
				require.NoError(t, o.err)
				t.Logf("the next waiter got the lock %v after the release handed it to a dead head (claim window %v, waiter expiry %v)",
					took.Round(time.Millisecond), handOverClaim, defaultWaiterExpiry)
				require.Less(t, took, 5*time.Second, "the dead head kept the lock past the claim window")
				require.NoError(t, o.l.Unlock(ctx))
			})
		}
	})
}

// TestRenewalAfterTheLastWaiterLeftLeavesNoHashWithoutExpiry: a plain
// renewal that a pass gathered while a waiter waited, and sent after the
// waiter left (which dropped the lock's waiters hash with its queue), makes
// the hash anew, without expiry. The script it then runs gives the hash its
// expiry or drops it; when the renewal's reply is lost, or that script
// does not run, the Client's next passes still run it, though nobody of
// the Client waits there any more, and a Client closed before its next pass
// runs it as it closes: no waiters hash is left without expiry.
func TestRenewalAfterTheLastWaiterLeftLeavesNoHashWithoutExpiry(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		admin := e.rueidisClient(t)
		lost := func(rf *replyFaults, k lockKeys) {
			rf.lose(func(cmd []string) bool { return cmd[0] == "HSET" && cmd[1] == k.waiters }, 1, 0)
		}
		// A fault is set before the renewal; what it returns, if anything,
		// runs after it.
		for name, fault := range map[string]func(t *testing.T, c *Client, rf *replyFaults, k lockKeys) (after func()){
			"renewal's reply lost": func(_ *testing.T, _ *Client, rf *replyFaults, k lockKeys) func() {
				lost(rf, k)
				return nil
			},
			"repair refused": func(_ *testing.T, _ *Client, rf *replyFaults, k lockKeys) func() {
				rf.refuse(runsWith(presenceScript, k.waiters), 1)
				return nil
			},
			// The passes' tries fail until another waiter of the Client
			// queued on the lock: the pass renews it as a repair, whose
			// answer (places may be gone) has the waiter look again.
			"waited on again before the next pass": func(t *testing.T, c *Client, rf *replyFaults, k lockKeys) func() {
				lost(rf, k)
				repair := runsWith(presenceScript, k.waiters)
				var joined atomic.Bool
				r := rf.refuse(func(cmd []string) bool { return !joined.Load() && repair(cmd) }, -1)
				return func() {
					require.Eventually(t, func() bool { return r.Hits() > 0 }, 5*time.Second, time.Millisecond,
						"no pass tried to settle the hash")
					var attempts atomic.Int32
					rf.watch(runsWith(acquireScript, k.lock), func(context.Context) { attempts.Add(1) })
					wctx, cancel := context.WithCancel(context.Background())
					got := c.Mutex(t.Name(), WithWaiterExpiry(900*time.Millisecond)).Acquire(wctx)
					defer func() {
						cancel()
						select {
						case <-got:
						case <-time.After(5 * time.Second):
							t.Error("the second waiter did not return")
						}
					}()
					require.Eventually(t, func() bool {
						c.presence.mu.Lock()
						defer c.presence.mu.Unlock()
						return c.presence.locks[k.waiters] != nil
					}, 5*time.Second, time.Millisecond, "the second waiter did not queue")
					// Its attempts as it queues and subscribes are over once
					// none came for a while.
					n := attempts.Load()
					for still := time.Now(); time.Since(still) < 300*time.Millisecond; time.Sleep(10 * time.Millisecond) {
						if m := attempts.Load(); m != n {
							n, still = m, time.Now()
						}
					}
					joined.Store(true)
					require.Eventually(t, func() bool { return attempts.Load() > n }, 5*time.Second, time.Millisecond,
						"the waiter was not told that its place may be gone")
				}
			},
			// The passes' tries fail until the Client closes, which it
			// does after the first of them: Close is left to run the
			// script.
			"closed before the next pass": func(t *testing.T, c *Client, rf *replyFaults, k lockKeys) func() {
				lost(rf, k)
				repair := runsWith(presenceScript, k.waiters)
				r := rf.refuse(func(cmd []string) bool {
					select {
					case <-c.closed:
						return false
					default:
						return repair(cmd)
					}
				}, -1)
				return func() {
					require.Eventually(t, func() bool { return r.Hits() > 0 }, 5*time.Second, time.Millisecond,
						"no pass tried to settle the hash")
					require.NoError(t, c.Close())
				}
			},
		} {
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				c, rf := e.faultyClient(t)
				require.True(t, c.tracker.on, "a Client with client-side caching renews with plain HSETs")
				held := mustLock(t, ctx, e.client(t).Mutex(t.Name()).Lock)
				m := c.Mutex(t.Name(), WithWaiterExpiry(900*time.Millisecond))
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				got := m.Acquire(wctx)
				var x renewal
				require.Eventually(t, func() bool {
					c.presence.mu.Lock()
					defer c.presence.mu.Unlock()
					en := c.presence.locks[m.keys.waiters]
					if en != nil {
						// What a pass gathers for the lock.
						x = renewal{keys: en.keys, expiry: en.expiry, touch: "0", deadline: time.Now().UnixMilli() + en.expiry.Milliseconds()}
					}
					return en != nil
				}, 5*time.Second, time.Millisecond, "the waiter never queued")
				cancel()
				select {
				case l := <-got:
					require.ErrorIs(t, l.Err(), context.Canceled)
				case <-time.After(5 * time.Second):
					t.Fatal("the cancelled waiter did not return")
				}
				require.Eventually(t, func() bool {
					n, err := admin.Do(ctx, admin.B().Exists().Key(m.keys.waiters, m.keys.queue).Build()).AsInt64()
					return err == nil && n == 0
				}, 5*time.Second, time.Millisecond, "the queue of the waiter that left is still there")
				after := fault(t, c, rf, m.keys)
				c.presence.renewPlain(ctx, []renewal{x}, nil)
				if after != nil {
					after()
				}
				require.Eventually(t, func() bool {
					pttl, err := admin.Do(ctx, admin.B().Pttl().Key(m.keys.waiters).Build()).AsInt64()
					return err == nil && pttl != -1
				}, 5*time.Second, 10*time.Millisecond, "a waiters hash the renewal made anew is left without expiry")
				require.NoError(t, held.Unlock(ctx))
			})
		}
	})
}
