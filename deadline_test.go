package redisync

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// deadlineOverrun is how long after its context's end a blocking call may
// return while Redis stalls: inflightGrace, and a margin for a loaded
// machine running some eighty calls at once under the race detector (on
// an idle one they return within 0.53 s). Graces that add up, the fault
// this guards against, take twice inflightGrace or more.
const deadlineOverrun = inflightGrace + 400*time.Millisecond

// blockingCall is one call that waits for Redis, on one primitive.
type blockingCall struct {
	name string
	// setup prepares the primitive (a size, a count) before Redis stalls.
	setup func(ctx context.Context, c *Client, name string) error
	// call makes the call; an Acquire returns once its channel delivered.
	call func(ctx context.Context, c *Client, name string) error
}

// acquired waits for the Lease an Acquire delivers, and gives back its
// error; a Lease that holds is released in the background.
func acquired(ch <-chan *Lease) error {
	l := <-ch
	if err := l.Err(); err != nil {
		return err
	}
	go l.Unlock(context.Background())
	return nil
}

// locked gives back the error of a Lock or TryLock; a Lease that holds is
// released in the background.
func locked(l *Lease, err error) error {
	if err == nil {
		go l.Unlock(context.Background())
	}
	return err
}

// blockingCalls are the calls that wait, on every primitive: Lock, TryLock
// and Acquire of every lock and semaphore, both sides of the read-write
// locks, and Wait of the latches.
func blockingCalls() []blockingCall {
	var calls []blockingCall
	// forms adds Lock, TryLock and Acquire of the handle h makes.
	forms := func(kind string, setup func(context.Context, *Client, string) error,
		lock, try func(context.Context, *Client, string) (*Lease, error),
		acquire func(context.Context, *Client, string) <-chan *Lease) {
		calls = append(calls,
			blockingCall{kind + ".Lock", setup, func(ctx context.Context, c *Client, n string) error { return locked(lock(ctx, c, n)) }},
			blockingCall{kind + ".TryLock", setup, func(ctx context.Context, c *Client, n string) error { return locked(try(ctx, c, n)) }},
			blockingCall{kind + ".Acquire", setup, func(ctx context.Context, c *Client, n string) error { return acquired(acquire(ctx, c, n)) }},
		)
	}
	group := func(c *Client, n string) *Group { return NewGroup(c.Mutex(n+":a"), c.Mutex(n+":b")) }
	quorum := func(c *Client, n string) *Quorum { return NewQuorum(n, []*Client{c}) }
	semSize := func(ctx context.Context, c *Client, n string) error {
		_, err := c.Semaphore(n).SetSize(ctx, 1)
		return err
	}
	forms("Mutex", nil,
		func(ctx context.Context, c *Client, n string) (*Lease, error) { return c.Mutex(n).Lock(ctx) },
		func(ctx context.Context, c *Client, n string) (*Lease, error) { return c.Mutex(n).TryLock(ctx) },
		func(ctx context.Context, c *Client, n string) <-chan *Lease { return c.Mutex(n).Acquire(ctx) })
	forms("FairMutex", nil,
		func(ctx context.Context, c *Client, n string) (*Lease, error) { return c.FairMutex(n).Lock(ctx) },
		func(ctx context.Context, c *Client, n string) (*Lease, error) { return c.FairMutex(n).TryLock(ctx) },
		func(ctx context.Context, c *Client, n string) <-chan *Lease { return c.FairMutex(n).Acquire(ctx) })
	forms("RWMutex.read", nil,
		func(ctx context.Context, c *Client, n string) (*Lease, error) { return c.RWMutex(n).RLock(ctx) },
		func(ctx context.Context, c *Client, n string) (*Lease, error) { return c.RWMutex(n).TryRLock(ctx) },
		func(ctx context.Context, c *Client, n string) <-chan *Lease { return c.RWMutex(n).RAcquire(ctx) })
	forms("RWMutex.write", nil,
		func(ctx context.Context, c *Client, n string) (*Lease, error) { return c.RWMutex(n).Lock(ctx) },
		func(ctx context.Context, c *Client, n string) (*Lease, error) { return c.RWMutex(n).TryLock(ctx) },
		func(ctx context.Context, c *Client, n string) <-chan *Lease { return c.RWMutex(n).Acquire(ctx) })
	forms("Semaphore", semSize,
		func(ctx context.Context, c *Client, n string) (*Lease, error) { return c.Semaphore(n).Lock(ctx, 1) },
		func(ctx context.Context, c *Client, n string) (*Lease, error) { return c.Semaphore(n).TryLock(ctx, 1) },
		func(ctx context.Context, c *Client, n string) <-chan *Lease { return c.Semaphore(n).Acquire(ctx, 1) })
	forms("Group", nil,
		func(ctx context.Context, c *Client, n string) (*Lease, error) { return group(c, n).Lock(ctx) },
		func(ctx context.Context, c *Client, n string) (*Lease, error) { return group(c, n).TryLock(ctx) },
		func(ctx context.Context, c *Client, n string) <-chan *Lease { return group(c, n).Acquire(ctx) })
	forms("Quorum", nil,
		func(ctx context.Context, c *Client, n string) (*Lease, error) { return quorum(c, n).Lock(ctx) },
		func(ctx context.Context, c *Client, n string) (*Lease, error) { return quorum(c, n).TryLock(ctx) },
		func(ctx context.Context, c *Client, n string) <-chan *Lease { return quorum(c, n).Acquire(ctx) })
	calls = append(calls,
		blockingCall{"Latch.Wait",
			func(ctx context.Context, c *Client, n string) error {
				_, err := c.Latch(n).TrySetCount(ctx, 1)
				return err
			},
			func(ctx context.Context, c *Client, n string) error { return c.Latch(n).Wait(ctx) }},
	)
	// The locks of other layouts (package redisson's): see layouts_test.go.
	if moreBlockingCalls != nil {
		moreBlockingCalls(forms, func(name string, setup, call func(context.Context, *Client, string) error) {
			calls = append(calls, blockingCall{name, setup, call})
		})
	}
	return calls
}

// moreBlockingCalls, when set, adds the calls of the locks of other
// layouts, which the tests of this package cannot import: with forms (Lock,
// TryLock and Acquire of a handle) and add (one call).
var moreBlockingCalls func(
	forms func(kind string, setup func(context.Context, *Client, string) error,
		lock, try func(context.Context, *Client, string) (*Lease, error),
		acquire func(context.Context, *Client, string) <-chan *Lease),
	add func(name string, setup, call func(context.Context, *Client, string) error))

// stalledClient is a Client the test stalls, and how it was made.
type stalledClient struct {
	kind string
	c    *Client
}

// requireCallsEndAtDeadline runs the calls on every Client, all at once,
// with a context of a second, while stall (called once, before) holds
// Redis up for longer, and requires each to fail and to return at most
// deadlineOverrun after its context ended. Then it closes the Clients
// (which waits for what the calls left in flight) and requires that
// nothing of the locks is left in e but what the setups wrote.
func requireCallsEndAtDeadline(t *testing.T, e *env, clients []stalledClient, calls []blockingCall, stall func()) {
	ctx := withTimeout(t, time.Minute)
	forms := []string{"deadline", "cancel"}
	for _, sc := range clients {
		for i, bc := range calls {
			for _, form := range forms {
				if bc.setup != nil {
					require.NoError(t, bc.setup(ctx, sc.c, sc.kind+":"+form+":"+strconv.Itoa(i)), "%s %s", sc.kind, bc.name)
				}
			}
		}
	}
	// The calls run at once on goroutines of their own (t.Parallel would
	// run GOMAXPROCS of them at a time, some after the stall), with a
	// context that has a deadline and one cancelled at the same moment
	// (rueidis hears a deadline where it is deaf to a cancellation, see
	// Dial), and each reports as a subtest.
	type outcome struct {
		err  error
		over time.Duration
	}
	outcomes := make([][][]outcome, len(clients))
	var wg sync.WaitGroup
	stall()
	for k, sc := range clients {
		outcomes[k] = make([][]outcome, len(forms))
		for f, form := range forms {
			outcomes[k][f] = make([]outcome, len(calls))
			for i, bc := range calls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					end := time.Now().Add(time.Second)
					cctx, cancel := context.WithDeadline(ctx, end)
					if form == "cancel" {
						cctx, cancel = context.WithCancel(ctx)
						stop := time.AfterFunc(time.Until(end), cancel)
						defer stop.Stop()
					}
					defer cancel()
					err := bc.call(cctx, sc.c, sc.kind+":"+form+":"+strconv.Itoa(i))
					outcomes[k][f][i] = outcome{err, time.Since(end)}
				}()
			}
		}
	}
	wg.Wait()
	for k, sc := range clients {
		for f, form := range forms {
			for i, bc := range calls {
				t.Run(sc.kind+"/"+form+"/"+bc.name, func(t *testing.T) {
					o := outcomes[k][f][i]
					t.Logf("returned %v after its context ended: %v", o.over.Round(time.Millisecond), o.err)
					require.Error(t, o.err, "Redis answered while stalled")
					require.LessOrEqual(t, o.over, deadlineOverrun, "returned %v after its context ended: %v", o.over.Round(time.Millisecond), o.err)
				})
			}
		}
	}
	for _, sc := range clients {
		require.NoError(t, sc.c.Close())
	}
	// What the setups wrote goes; every lock is free, nobody waits.
	c := e.client(t)
	for _, sc := range clients {
		for _, form := range forms {
			for i := range calls {
				n := sc.kind + ":" + form + ":" + strconv.Itoa(i)
				_, err := c.Semaphore(n).Delete(ctx)
				require.NoError(t, err)
				_, err = c.Latch(n).Reset(ctx, 0)
				require.NoError(t, err)
			}
		}
	}
	require.NoError(t, c.Close())
	e.requireNothingLeft(t, "redisync:")
}

// TestBlockingCallsEndAtDeadlineWhileServerPaused: while the server pauses
// every client (CLIENT PAUSE ALL), every call that waits returns at most
// inflightGrace (and a margin) after its context's deadline, on a Client
// from Dial and on one from New; once the server answers again, what the
// calls left in flight is undone and the Clients close.
func TestBlockingCallsEndAtDeadlineWhileServerPaused(t *testing.T) {
	e := ownServer(t)
	clients := []stalledClient{{"dial", e.client(t)}, {"new", e.renewalClient(t)}}
	requireCallsEndAtDeadline(t, e, clients, blockingCalls(), func() {
		_, err := e.server.Do("CLIENT", "PAUSE", "3000", "ALL")
		require.NoError(t, err)
	})
}

// TestBlockingCallsEndAtDeadlineWhileConnectionsOpen: the same when the
// Clients' connections were closed just before the pause, so that the
// calls open new ones, whose handshake rueidis waits for deaf to a
// cancellation (see Dial).
func TestBlockingCallsEndAtDeadlineWhileConnectionsOpen(t *testing.T) {
	e := ownServer(t)
	clients := []stalledClient{{"dial", e.client(t)}, {"new", e.renewalClient(t)}}
	requireCallsEndAtDeadline(t, e, clients, blockingCalls(), func() {
		_, err := e.server.Do("CLIENT", "KILL", "TYPE", "normal")
		require.NoError(t, err)
		_, err = e.server.Do("CLIENT", "PAUSE", "3000", "ALL")
		require.NoError(t, err)
	})
}

// TestBlockingCallsEndAtDeadlineWhileConnectionsHeld: the same while every
// connection of the Clients, and every one they open meanwhile, is held
// up on the way (nothing forwarded either way, nothing closed), on a
// Client from Dial and on one from New.
func TestBlockingCallsEndAtDeadlineWhileConnectionsHeld(t *testing.T) {
	e := ownServer(t)
	dialed, p := e.proxied(t)
	rc, err := rueidis.NewClient(proxiedOption(p.Addr()))
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	made, err := New(rc, WithLogger(quietLogger()))
	require.NoError(t, err)
	clients := []stalledClient{{"dial", dialed}, {"new", made}}
	requireCallsEndAtDeadline(t, e, clients, blockingCalls(), func() { p.Pause(3 * time.Second) })
}

// TestBlockingCallsEndAtDeadlineWhileReplicasDoNotAcknowledge: with
// WithReplicaAck and no replica to acknowledge, the WAIT after each
// attempt lasts its timeout on a dedicated connection, deaf to a
// cancellation; every call of the primitives that wait for replicas
// returns at most inflightGrace (and a margin) after its context ended all
// the same, and what its last attempt took is given back once the WAIT
// answered.
func TestBlockingCallsEndAtDeadlineWhileReplicasDoNotAcknowledge(t *testing.T) {
	e := ownServer(t)
	opt := WithReplicaAck(1, 2*time.Second)
	clients := []stalledClient{{"dial", e.client(t, opt)}, {"new", e.renewalClient(t, opt)}}
	var calls []blockingCall
	for _, bc := range blockingCalls() {
		for _, kind := range []string{"Mutex.", "FairMutex.", "RWMutex.", "Semaphore.", "Group."} {
			if strings.HasPrefix(bc.name, kind) {
				calls = append(calls, bc)
			}
		}
	}
	requireCallsEndAtDeadline(t, e, clients, calls, func() {})
}

// TestLockReplyHeldPastItsContext: a Lock whose acquire script ran but
// whose reply is held back returns its context's error within the grace
// after the context ended, by its deadline or by a cancellation, and what
// the script took is released once the reply came: the next Lock takes
// the lock at once.
func TestLockReplyHeldPastItsContext(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		c, rf := e.faultyClient(t)
		other := e.client(t)
		for _, how := range []string{"deadline", "cancel"} {
			t.Run(how, func(t *testing.T) {
				name := "grace:" + how
				m := c.Mutex(name)
				r, open := rf.gate(runsWith(acquireScript, m.keys.lock), 1, false)
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				ended, _ := ctx.Deadline()
				if how == "cancel" {
					ctx, cancel = context.WithCancel(context.Background())
					defer cancel()
					go func() {
						<-r.Ran()
						time.Sleep(100 * time.Millisecond)
						ended = time.Now() // read once ctx ended
						cancel()
					}()
				}
				errc := make(chan error, 1)
				go func() { errc <- locked(m.Lock(ctx)) }()
				select {
				case <-r.Ran():
				case <-time.After(5 * time.Second):
					t.Fatal("the acquire script did not run")
				}
				var err error
				select {
				case err = <-errc:
				case <-time.After(5 * time.Second):
					t.Fatal("Lock did not return while its reply was held")
				}
				returned := time.Now()
				<-ctx.Done()
				require.ErrorIs(t, err, ctx.Err())
				// The context ended before Lock returned (the reply is still
				// held); Lock waited for the reply its grace at most.
				require.Less(t, returned.Sub(ended), deadlineOverrun)
				open()
				lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer lcancel()
				l, err := other.Mutex(name).Lock(lctx)
				require.NoError(t, err)
				require.NoError(t, l.Unlock(lctx))
			})
		}
	})
}
