package redisync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// acquisition is the waiting loop every primitive's acquisition runs: try,
// and while the thing is taken, wait for a release message on channel or
// for the wait the attempt returned (a holder that dies publishes nothing),
// then try again. It retries connection errors with backoff until ctx ends,
// and undoes an attempt whose outcome is unknown when ctx ends.
type acquisition struct {
	c *Client
	// primitive and name label the acquisition in metrics.
	primitive, name string

	channel string // where releases are announced
	key     string // for log lines
	// attempt runs the acquire script once, with a context from inflight.
	// It returns the granted Lease, or how long to wait at most before the
	// next attempt (the holder's remaining lease), or an error.
	attempt func(ctx context.Context) (*Lease, time.Duration, error)
	// undo releases what an attempt may have taken; it gets a detached
	// context.
	undo func(ctx context.Context)
	// leave, if set, runs (with a detached context) whenever a waiting
	// acquisition ends without the lease: queued primitives give up their
	// place.
	leave func(ctx context.Context)
	// busy is the error of a single attempt (once) that found the thing
	// taken.
	busy error
	// holder, if set, tells who held the thing at the last attempt that
	// found it taken ("" when not known): the error of a wait that its
	// ctx ended names it.
	holder func() string
	// target, if set, is the waiter id that targeted messages wake. They
	// come on the Client's own channel of the lock (waiterChannel), which
	// the acquisition then listens to instead of channel.
	target string
	// listenOn, if set, is that channel, made once with the lock.
	listenOn string
	// granted, if set, takes the lock a release handed over to target, as
	// its message (what follows the id) told. It returns nil for a
	// hand-over that is not to be trusted; then, as on an error, the
	// attempts go on.
	granted func(ctx context.Context, msg string) (*Lease, error)
	// probe, if set, is what the Client's presence pass reads for the
	// waiters of channel (see subscription.follow): waiters that have no
	// place in a queue learn from it within one pass what a lost message
	// would have told them.
	probe probe
	// lostIfTimed, if set, says that a broadcast always comes before an
	// attempt can succeed (a latch opens with one): an attempt that succeeds
	// after a wait its timer ended reports a lost wake-up (fellBack).
	lostIfTimed bool
}

func (a *acquisition) run(ctx context.Context, once bool) (granted *Lease, err error) {
	if !once {
		defer func() {
			holder := ""
			if err != nil && a.holder != nil {
				holder = a.holder()
			}
			err = waitEnded(ctx, err, a.primitive, a.name, holder, a.busy)
		}()
	}
	if f := a.c.cfg.metrics.Acquired; f != nil {
		start := time.Now()
		defer func() {
			if granted != nil {
				f(a.primitive, a.name, time.Since(start))
			}
		}()
	}
	if a.leave != nil && !once {
		defer func() {
			if granted == nil {
				a.c.cleanup(ctx, a.leave)
			}
		}()
	}
	var w waiting
	defer w.end(a)
	if !once && a.target != "" {
		if w.sub = a.c.notify.joinLive(a.listen(), ownPubSub); w.sub != nil {
			w.targeted = w.sub.expect(a.target)
		}
	}
	var lastErr error
	retry := errorBackoff()
	failures := retryLog{log: a.c.log, msg: "redisync: acquire failed"}
	for {
		w.mark()
		l, wait, err := a.attempt(ctx)
		if err != nil {
			// A refused re-entry (ErrNotHeld) took nothing, and the loss
			// of the parent it reports may be what ended ctx (a context
			// derived from the parent's): it is the answer.
			if ctx.Err() != nil && !errors.Is(err, ErrNotHeld) {
				// The script's outcome is unknown: take back what it may
				// have taken.
				a.abandon(ctx)
				return nil, ctxErr(ctx, lastErr)
			}
			if once || !transient(err) {
				if transient(err) {
					// A single attempt that failed on the connection may
					// have taken the lock before its reply was lost: its
					// outcome is unknown, and nothing retries it to learn
					// it. Take back what it may have taken, so that it is
					// not left held, by nobody, until its lease ends.
					a.c.cleanupBounded(ctx, a.undo)
				}
				return nil, err
			}
			failures.failed("key", a.key, "err", err)
			lastErr = err
			if _, err := sleep[struct{}](ctx, a.c, nil, nil, retry.next()); err != nil {
				a.abandon(ctx)
				return nil, ctxErr(ctx, lastErr)
			}
			continue
		}
		retry.reset()
		failures.succeeded("key", a.key)
		if l != nil {
			if w.timedOut && a.lostIfTimed {
				countLost(a.c, []<-chan struct{}{w.sub.sema.Wait(w.timedGen)}, a.primitive, a.name, a.key)
			}
			return a.keep(ctx, l)
		}
		if once {
			return nil, a.busy
		}
		if l, err := a.await(ctx, &w, max(wait, time.Millisecond)); l != nil || err != nil {
			return l, err
		}
	}
}

// listen is the channel the acquisition waits on: its Client's own channel
// of the lock when releases name it (target), the lock's channel otherwise.
func (a *acquisition) listen() string {
	if a.target != "" {
		if a.listenOn != "" {
			return a.listenOn
		}
		return waiterChannel(a.channel, a.c.id)
	}
	return a.channel
}

// waiting is what an acquisition waits with: its subscription to the
// lock's channel, and the messages that name it.
type waiting struct {
	sub      *subscription
	targeted <-chan string
	// gen is the subscription's broadcast generation, read before the last
	// attempt: a broadcast since then ends the next wait at once.
	gen uint64
	// timedOut tells that the last wait for a broadcast ended by its timer;
	// timedGen is the generation that wait waited past.
	timedOut bool
	timedGen uint64
}

// mark reads the broadcast generation before an attempt.
func (w *waiting) mark() {
	if w.sub != nil {
		w.gen = w.sub.sema.Gen()
	}
}

// end leaves the subscription, if any.
func (w *waiting) end(a *acquisition) {
	if w.sub != nil {
		if a.target != "" {
			w.sub.forget(a.target)
		}
		w.sub.leave()
	}
}

// await waits, at most wait, for a reason to attempt again: the first time,
// for the subscription to take effect (a release published before it was
// missed); then for a message naming the waiter, or a broadcast since the
// generation read before the last attempt. It returns the Lease when a
// release handed the lock over, nil to attempt again, or an error to give
// up with.
func (a *acquisition) await(ctx context.Context, w *waiting, wait time.Duration) (*Lease, error) {
	w.timedOut = false
	first := w.sub == nil
	if first {
		var err error
		if w.sub, err = a.c.notify.join(ctx, a.listen(), ownPubSub); err != nil {
			return nil, err
		}
		if a.probe != nil {
			w.sub.follow(a.probe)
		}
		if a.target == "" {
			_, err = sleep(ctx, a.c, w.sub.ready, nil, wait)
			return nil, err
		}
		w.targeted = w.sub.expect(a.target)
	}
	if w.targeted != nil {
		// A wake-up gives "", a lock handed over its token; the first time,
		// the subscription taking effect ends the wait too. The Client's
		// presence pass wakes the waiter whatever messages were lost: a
		// wait that the fallback timer ends is counted.
		var ready <-chan struct{}
		if first {
			ready = w.sub.ready
		}
		timer := time.NewTimer(wait)
		defer timer.Stop()
		var token string
		select {
		case token = <-w.targeted:
		case <-ready:
		case <-timer.C:
			if wait >= waiterFallback {
				a.c.fellBack(a.primitive, a.name, a.key)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-a.c.closed:
			return nil, ErrClosed
		}
		if token == "" || a.granted == nil {
			return nil, nil
		}
		l, err := a.granted(ctx, token)
		if err != nil {
			a.c.log.Warn("redisync: taking a lock handed over failed; asking again", "key", a.key, "err", err)
			return nil, nil
		}
		if l == nil {
			return nil, nil // a hand-over that came late: ask again
		}
		return a.keep(ctx, l)
	}
	// A broadcast since the generation was read, before the attempt, ends
	// the wait at once: it cannot have been meant for a later attempt.
	wake := w.sub.sema.Wait(w.gen)
	_, err := sleep(ctx, a.c, wake, nil, wait)
	if err == nil {
		select {
		case <-wake:
		default:
			w.timedOut, w.timedGen = true, w.gen
		}
	}
	return nil, err
}

// keep returns a granted lease, unless ctx ended meanwhile: then the lease
// is given back, in the background.
func (a *acquisition) keep(ctx context.Context, l *Lease) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		a.c.abandonAfter(ctx, l, err)
		return nil, err
	}
	return l, nil
}

// abandon runs undo, in the background once ctx ended.
func (a *acquisition) abandon(ctx context.Context) {
	a.c.cleanup(ctx, a.undo)
}

// cleanup runs f, a release or a leave that the library sends on its own
// when an acquisition ends without the lease, with a detached context
// (bounded by cleanupTimeout). The caller waits for it until the grace of
// its call passed at most (graceOver: inflightGrace after ctx ended, also
// when ctx ends while f runs), so that what it undoes is undone when it
// returns while Redis answers, and returns at once while Redis cannot be
// reached: f then goes on in the background, and Close waits for it
// before it closes the connection. A closing Client runs it to its end.
func (c *Client) cleanup(ctx context.Context, f func(context.Context)) {
	if ctx.Done() == nil {
		c.detachedRun(ctx, f)
		return
	}
	over, stop := graceOver(ctx)
	defer stop()
	c.cleanupUntil(ctx, f, over, nil)
}

// cleanupBounded is cleanup for an attempt whose outcome is unknown while
// its caller's ctx may still be live (a single attempt whose reply was
// lost): the caller waits for f inflightGrace at most, less once its
// call's grace passed, and f goes on in the background meanwhile.
func (c *Client) cleanupBounded(ctx context.Context, f func(context.Context)) {
	timer := time.NewTimer(inflightGrace)
	defer timer.Stop()
	var over <-chan struct{}
	if ctx.Done() != nil {
		o, stop := graceOver(ctx)
		defer stop()
		over = o
	}
	c.cleanupUntil(ctx, f, over, timer.C)
}

// cleanupUntil runs f in the background (counted for Close) and waits for
// it until over closes or timeout fires (either may be nil); a closing
// Client runs it to its end.
func (c *Client) cleanupUntil(ctx context.Context, f func(context.Context), over <-chan struct{}, timeout <-chan time.Time) {
	if !c.background() {
		c.detachedRun(ctx, f)
		return
	}
	done := make(chan struct{})
	go func() {
		defer c.cleanups.Done()
		defer close(done)
		c.detachedRun(ctx, f)
	}()
	select {
	case <-done:
	case <-over:
	case <-timeout:
	}
}

// detachedRun runs f with a context detached from ctx's cancellation.
func (c *Client) detachedRun(ctx context.Context, f func(context.Context)) {
	dctx, cancel := detached(ctx)
	defer cancel()
	f(dctx)
}

// background counts work the library goes on with after its caller
// returned (cleanups), which Close waits for, and reports whether it may
// start: not once the Client is closed, when it runs to its end before
// its caller returns instead. Call c.cleanups.Done when it ended.
func (c *Client) background() bool {
	c.cleanupMu.Lock()
	defer c.cleanupMu.Unlock()
	if c.isClosed() {
		return false
	}
	c.cleanups.Add(1)
	return true
}

// checkHandle checks what every method of a primitive's handle checks: the
// error the constructor found, that a Client made it, ctx, and that the
// Client is open.
func checkHandle(what string, c *Client, err error, ctx context.Context) error {
	switch {
	case err != nil:
		return err
	case c == nil:
		return fmt.Errorf("%w: %s not made by a Client", ErrInvalidArgument, what)
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	case c.isClosed():
		return ErrClosed
	}
	return nil
}

// sleep waits for wake, at most d, and returns what it received (the zero
// value after d). On ctx's end or the Client's close it calls cancel (when
// not nil) and returns the error.
func sleep[T any](ctx context.Context, c *Client, wake <-chan T, cancel func(), d time.Duration) (v T, err error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v = <-wake:
		return v, nil
	case <-timer.C:
	case <-ctx.Done():
		err = ctx.Err()
	case <-c.closed:
		err = ErrClosed
	}
	if cancel != nil {
		cancel()
	}
	return v, err
}

// inflightGrace is how long an attempt already sent to Redis may still take
// after the caller's context ended: long enough to learn its outcome from a
// live server and release what it took, short enough to give up on a hung
// one.
const inflightGrace = 500 * time.Millisecond

// graceKey keys the grace of a blocking call, which withGrace puts in the
// call's context (see graceOver).
type graceKey struct{}

// grace is the moment a blocking call must have returned by: over closes
// inflightGrace after the call's context ended. It is found by that
// context's Done channel: the grace is the call's own, not that of a
// context derived from it (a Lease's Context, which a later call may be
// given).
// Most calls return without waiting past their context's end, so over is
// made when first asked for (graceOver), not with the call.
type grace struct {
	ctx context.Context // the call's context
	// call, when set, is the grace of the call that ctx was derived from
	// (shareGrace): once that call's context ended, this grace is that one.
	call *grace

	mu    sync.Mutex
	over  <-chan struct{} // nil until first asked for
	stop  func()          // ends over's timer; nil until over is made
	ended bool            // the call returned
}

// withGrace gives a call that waits (Lock, TryLock, Acquire, Wait) its
// grace: it returns at most inflightGrace after ctx ends, whatever Redis
// does. Its waits past ctx's end (for a script on its way, an undo, a
// leave, a read) wait for the grace to pass (graceOver) rather than for a
// grace of their own, so that the waits one after the other never add up
// to more than one grace. Call g.end when the call returned; g is nil for
// a ctx that never ends, whose call needs no grace.
func withGrace(ctx context.Context) (gctx context.Context, g *grace) {
	if ctx.Done() == nil {
		return ctx, nil
	}
	g = &grace{ctx: ctx}
	return context.WithValue(ctx, graceKey{}, g), g
}

// overChan returns the channel that closes when the grace passed, made at
// the first call. Made after ctx ended, it is as if made with the call:
// the grace runs from ctx's end (graceLeft), so that waiting to ask costs
// the caller nothing.
func (g *grace) overChan() <-chan struct{} {
	if g.call != nil && g.call.ctx.Err() != nil {
		// ctx ended with the call's context, or ends before the call's
		// grace would: the call's grace bounds its waits.
		return g.call.overChan()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.over == nil {
		if g.ended {
			// Asked for after the call returned (by work it left running):
			// its grace is over, as the call's end ends it.
			closed := make(chan struct{})
			close(closed)
			g.over = closed
			return g.over
		}
		left := func() time.Duration { return inflightGrace }
		if g.ctx.Err() != nil {
			left = func() time.Duration { return graceLeft(g.ctx) }
		}
		actx, stop := graceAfter(g.ctx, left)
		g.over, g.stop = actx.Done(), stop
	}
	return g.over
}

// end ends the grace when its call returned; a nil g has nothing to end.
func (g *grace) end() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ended = true
	if g.stop != nil {
		g.stop()
	}
}

// shareGrace gives actx, a context derived from ctx that may also end on
// its own (watchClosed), the grace of ctx's call: the waits past actx's end
// wait for that grace, not each for one of its own from actx's end, which
// would add up past the call's grace (a member of a Group taken one at a
// time waits for its attempt, then its undo, then its leave, each past
// actx's end, and the group for its release after them). Ended on its own
// while the call's context is live (a Client closed), actx's waits get
// inflightGrace from its end, as any context's. Call done when actx is no
// longer used.
func shareGrace(ctx, actx context.Context) (sctx context.Context, done func()) {
	call, ok := ctx.Value(graceKey{}).(*grace)
	if !ok || call.ctx.Done() != ctx.Done() || actx.Done() == ctx.Done() {
		return actx, func() {}
	}
	g := &grace{ctx: actx, call: call}
	return context.WithValue(actx, graceKey{}, g), g.end
}

// graceOver returns a channel closed when the grace of the call that ctx
// belongs to passed (see withGrace). For a context withGrace did not make,
// the grace is inflightGrace after ctx ends, starting now if ctx ended
// already. Call stop when done waiting.
func graceOver(ctx context.Context) (over <-chan struct{}, stop func()) {
	if g, ok := ctx.Value(graceKey{}).(*grace); ok && g.ctx.Done() == ctx.Done() {
		return g.overChan(), func() {}
	}
	actx, done := inflight(ctx)
	return actx.Done(), done
}

// inflight returns a context that ends inflightGrace after ctx ended: the
// grace of a call (see withGrace). Call done when the call returned.
func inflight(ctx context.Context) (actx context.Context, done func()) {
	return graceAfter(ctx, func() time.Duration { return inflightGrace })
}

// graceAfter returns a context that ends left() after ctx ended (left is
// called then). Call done when the call returned.
func graceAfter(ctx context.Context, left func() time.Duration) (actx context.Context, done func()) {
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(left(), cancel) })
	return actx, func() { stop(); cancel() }
}

// graceLeft is what is left of the grace of a call whose context ctx
// ended before its grace was first asked for: inflightGrace from its end.
// A context that ended at its deadline ended then, however late this is
// asked; one cancelled ended about now, for the call's waits watch ctx and
// ask as soon as it ends (takeInFlight).
func graceLeft(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return min(max(time.Until(d.Add(inflightGrace)), 0), inflightGrace)
	}
	return inflightGrace
}

// execTaking runs s once on keys with args: a script that may take a lock
// or permits, undone by undo when its caller gave up on it (see
// takeInFlight). The caller gets its reply, or ctx's error.
func (c *Client) execTaking(ctx context.Context, s script, keys, args []string, undo func(context.Context)) rueidis.RedisResult {
	if ctx.Done() == nil {
		return s.exec(ctx, c.rc, keys, args)
	}
	// The caller may change its slices once it got its answer: the call
	// gets copies, in one allocation.
	keys, args = cloneWords(keys, args)
	r, ok := takeInFlight(c, ctx, func(actx context.Context) rueidis.RedisResult { return s.exec(actx, c.rc, keys, args) }, undo)
	if !ok {
		return rueidis.NewErrorResult(ctx.Err())
	}
	return r
}

// cloneWords returns copies of keys and args that share one backing array.
func cloneWords(keys, args []string) (k, a []string) {
	w := make([]string, 0, len(keys)+len(args))
	w = append(append(w, keys...), args...)
	return w[:len(keys):len(keys)], w[len(keys):]
}

// takeInFlight runs call, which sends to Redis what may take a lock or
// permits (a script, and the WAIT after it), and returns its result, true.
// The caller's context ending does not abandon a call on its way, which
// would leave its outcome unknown: the caller gets its result, or false
// once the grace of its call passed (graceOver: inflightGrace after ctx
// ended), whatever rueidis does (it waits for a connection being opened
// deaf to a cancellation). The call then goes on in the background, and
// undo runs once it returned (or cleanupTimeout later, if it never does),
// so that what it took is given back after it was taken. An undo sent at
// once could overtake the call, on another connection of the multiplexed
// client or past a connection held up, and leave the lock held by nobody
// until its lease ran out. Close waits for it. A nil undo is for a call
// whose outcome needs no undo (a read, a renewal): it is cancelled once
// given up on.
func takeInFlight[T any](c *Client, ctx context.Context, call func(context.Context) T, undo func(context.Context)) (T, bool) {
	if ctx.Done() == nil {
		return call(ctx), true
	}
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	reply := make(chan T, 1)
	go func() { reply <- call(actx) }()
	select {
	case r := <-reply:
		cancel()
		return r, true
	case <-ctx.Done():
	}
	over, stop := graceOver(ctx)
	defer stop()
	select {
	case r := <-reply:
		cancel()
		return r, true
	case <-over:
	}
	if undo == nil {
		cancel()
	}
	settle := func() {
		// A call that never answers (rueidis may not hear the cancel) is
		// given up on, and undone all the same.
		wait := time.NewTimer(cleanupTimeout)
		select {
		case <-reply:
		case <-wait.C:
		}
		wait.Stop()
		cancel()
		if undo != nil {
			dctx, dcancel := detached(ctx)
			undo(dctx)
			dcancel()
		}
	}
	var zero T
	if !c.background() {
		settle()
		return zero, false
	}
	go func() {
		defer c.cleanups.Done()
		settle()
	}()
	return zero, false
}

// callInFlight runs call, one call to Redis that takes nothing (a read, a
// renewal) or whose outcome is not undone, and returns what it returns, or
// ctx's error once the grace of the caller's call passed, whatever rueidis
// does (see takeInFlight). ctx ending does not cancel the call before:
// a connection being dialed for it would fail for every call waiting for
// it.
func callInFlight[T any](c *Client, ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	type reply struct {
		v   T
		err error
	}
	r, ok := takeInFlight(c, ctx, func(actx context.Context) reply {
		v, err := call(actx)
		return reply{v, err}
	}, nil)
	if !ok {
		return r.v, ctx.Err()
	}
	return r.v, r.err
}

// unclaimedWarn is how long a Lease Acquire delivered may wait on its
// channel, unused, before its abandonment is logged as a probable mistake
// (a channel form called as a statement) rather than a lost race.
const unclaimedWarn = time.Second

// acquireAsync runs acquire in the background and delivers one Lease on the
// returned channel, then closes it; failure is a Lease whose Err is set.
// The Lease is offered until its receiver first uses it (claim): if ctx
// ends before that, it is abandoned, what it holds is released and its Err
// is ctx's error. A nil Client serves to deliver a check error.
func (c *Client) acquireAsync(ctx context.Context, check error, acquire func(context.Context) (*Lease, error)) <-chan *Lease {
	ch := make(chan *Lease, 1)
	if check != nil {
		ch <- failedLease(check)
		close(ch)
		return ch
	}
	c.waiters.Add(1)
	go func() {
		defer c.waiters.Done()
		l, err := acquire(ctx)
		if err != nil {
			ch <- failedLease(err)
			close(ch)
			return
		}
		l.mu.Lock()
		l.offered = l.failed == nil && !l.released
		l.mu.Unlock()
		offered := time.Now()
		ch <- l
		close(ch)
		stop := context.AfterFunc(ctx, func() {
			if len(ch) == 1 && time.Since(offered) >= unclaimedWarn {
				c.log.Warn("redisync: a Lease delivered by Acquire was never received before its context ended; released",
					"lock", l.Name(), "waited", time.Since(offered).Round(time.Millisecond))
			}
			l.reclaim(ctx.Err())
		})
		l.mu.Lock()
		if l.offered {
			l.stopReclaim = stop
		} else {
			stop()
		}
		l.mu.Unlock()
	}()
	return ch
}

// transient reports whether an acquisition error is worth retrying: the
// connection failed, or Redis cannot serve the command for a while (a
// server loading its data after a restart, a Cluster slot moving or
// without a master), rather than Redis refusing the command.
func transient(err error) bool {
	var re *rueidis.RedisError
	if errors.Is(err, ErrNotReplicated) {
		return true
	}
	if errors.As(err, &re) {
		return re.IsLoading() || re.IsTryAgain() || re.IsClusterDown() || strings.HasPrefix(re.Error(), "MASTERDOWN")
	}
	return !errors.Is(err, ErrClosed) && !errors.Is(err, ErrNotHeld) && !errors.Is(err, ErrInvalidArgument)
}

// ctxErr is ctx's error, with the last Redis error seen while retrying.
func ctxErr(ctx context.Context, last error) error {
	if last == nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w (last error: %w)", ctx.Err(), last)
}

// waitError is the error of a wait that its ctx ended: it names what was
// waited for, and matches ctx's error and the error a single attempt
// would have given (busy).
type waitError struct{ error }

func (e waitError) Unwrap() error { return e.error }

// waitEnded is err, the error a waiting acquisition of the primitive
// (as Metrics names it) of the given name ends with, made to name what it
// waited for (and its holder, when the last attempt saw it) when ctx's end
// ended it: it then matches ctx's error (and
// the last error retried, which err carries) and busy, the error a single
// attempt that found the thing taken gives (ErrLocked, ErrNoPermits; nil
// for a latch, which nobody holds). Every other error, and one that names
// a wait already (a member of a group), is returned as it is. A single
// attempt keeps its own errors: there ErrLocked means taken at that
// attempt, and ctx's error that ctx ended before it.
func waitEnded(ctx context.Context, err error, primitive, name, holder string, busy error) error {
	if err == nil || ctx.Err() == nil || !errors.Is(err, ctx.Err()) || errors.As(err, new(waitError)) {
		return err
	}
	what := waitWords.Replace(primitive)
	if primitive == fairKind.primitive {
		what = "fair mutex"
	}
	what = fmt.Sprintf("%s %q", what, name)
	if holder != "" {
		what += " (held by " + holder + ")"
	}
	if busy == nil {
		return waitError{errorf("wait for %s ended: %w", what, err)}
	}
	return waitError{errorf("wait for %s ended: %w; %w", what, err, busy)}
}

// waitWords name the primitives of Metrics in words.
var waitWords = strings.NewReplacer("_", " ", ".read", " (read side)", ".write", " (write side)")
