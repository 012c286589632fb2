package redisync

import (
	"context"
	"reflect"
	"slices"
	"time"
)

// A Group or a Quorum that waits, waits for several locks at once, often
// through several Clients.
//
// It waits in a waitSet: one subscription per lock channel that blocked
// it, woken by the broadcasts of its subscription (a "1" message: the lock
// was released, every local waiter looks again), by generation as an
// RWMutex reader is: the generations are read before each attempt, and a
// broadcast since then ends the next wait at once. Every waiter of the lock
// gets the broadcast, so none has to hand it on; a waiter that loses the
// race for the lock registers again with its failed attempt. The set
// selects over a number of channels known only at run time, hence
// reflect.Select.
//
// A waiter of a Redisson lock waits in a waitSet too (redisson_wait.go):
// on its channel on one or both kinds of pub/sub, which Redisson's
// publishers may use.
//
// An acquisition that spans Clients ends when any of them is closed
// (watchClosed, and every wait of the set), and Close of each of them waits
// for it (acquireHandle). Attempts that failed with errors are retried
// after a backoff.

// waitSet is what an acquisition that waits on several locks waits on: one
// subscription per lock channel (of one Client) that blocked it, joined the
// first time it did.
type waitSet struct {
	subs  []*subscription
	gens  []uint64        // each subscription's generation, read by mark
	fresh []*subscription // joined since the last wait: not known to be in effect
}

// join subscribes to channel on the kind of pub/sub on c, unless the set
// already has it, and has c's presence pass read p for it, when not nil
// (see subscription.follow). It returns ctx's error when ctx ends first.
func (w *waitSet) join(ctx context.Context, c *Client, channel string, kind pubsubKind, p probe) error {
	if w.has(c, subKey{channel, kind}) {
		return nil
	}
	s, err := c.notify.join(ctx, channel, kind)
	if err != nil {
		return err
	}
	if p != nil {
		s.follow(p)
	}
	w.add(s)
	w.fresh = append(w.fresh, s)
	return nil
}

// joinLive adds c's subscription of channel on the kind of pub/sub to the
// set when messages flow on it already (see notifier.joinLive), and reports
// whether it is in the set. A subscription joined so is in effect: the
// next wait waits for its broadcasts at once.
func (w *waitSet) joinLive(c *Client, channel string, kind pubsubKind) bool {
	if w.has(c, subKey{channel, kind}) {
		return true
	}
	s := c.notify.joinLive(channel, kind)
	if s != nil {
		w.add(s)
	}
	return s != nil
}

// has reports whether the set has c's subscription k.
func (w *waitSet) has(c *Client, k subKey) bool {
	for _, s := range w.subs {
		if s.n.c == c && s.key() == k {
			return true
		}
	}
	return false
}

// add puts a joined subscription in the set.
func (w *waitSet) add(s *subscription) {
	w.subs = append(w.subs, s)
	w.gens = append(w.gens, s.sema.Gen())
}

// mark reads the generation of every subscription: call it before each
// attempt, so that a broadcast while the attempt's reply is on its way ends
// the next wait at once.
func (w *waitSet) mark() {
	for i, s := range w.subs {
		w.gens[i] = s.sema.Gen()
	}
}

// wait blocks until a broadcast on one of the subscriptions since mark, for
// at most d, and reports whether d ran out (timedOut). If subscriptions
// were joined since the last wait, it waits instead until they are in
// effect: a release published before was missed, so the caller looks again
// then, and d running out first is no sign of a lost wake-up (timedOut is
// false). It returns ctx's error when ctx ends, ErrClosed when one of
// clients is closed.
func (w *waitSet) wait(ctx context.Context, clients []*Client, d time.Duration) (timedOut bool, err error) {
	timer := time.NewTimer(max(d, time.Millisecond))
	defer timer.Stop()
	base := []reflect.SelectCase{recvCase(ctx.Done()), recvCase(timer.C)}
	for _, c := range clients {
		base = append(base, recvCase(c.closed))
	}
	if fresh := w.fresh; len(fresh) > 0 {
		w.fresh = nil
		for _, s := range fresh {
			i, _, _ := reflect.Select(append(slices.Clip(base), recvCase(s.ready)))
			if i < len(base) {
				return false, waitErr(ctx, i)
			}
		}
		return false, nil
	}
	cases := slices.Clip(base)
	for i, s := range w.subs {
		cases = append(cases, recvCase(s.sema.Wait(w.gens[i])))
	}
	i, _, _ := reflect.Select(cases)
	if i >= len(base) {
		return false, nil
	}
	return i == 1, waitErr(ctx, i)
}

// waitErr maps the index of a base case of wait: 0 ctx, 1 the timer, then
// the Clients' closed channels.
func waitErr(ctx context.Context, i int) error {
	switch i {
	case 0:
		return ctx.Err()
	case 1:
		return nil
	}
	return ErrClosed
}

// keepOnly drops the subscriptions of the set but the one to channel on c:
// the caller waits for that lock alone now, and the releases of the others
// would only wake it for nothing.
func (w *waitSet) keepOnly(c *Client, channel string) {
	for i := 0; i < len(w.subs); {
		if s := w.subs[i]; s.n.c != c || s.channel != channel {
			s.leave()
			w.subs = slices.Delete(w.subs, i, i+1)
			w.gens = slices.Delete(w.gens, i, i+1)
			w.fresh = slices.DeleteFunc(w.fresh, func(x *subscription) bool { return x == s })
			continue
		}
		i++
	}
}

// leave drops every subscription of the set.
func (w *waitSet) leave() {
	for _, s := range w.subs {
		s.leave()
	}
	w.subs, w.gens, w.fresh = nil, nil, nil
}

// freeAfterTimer reports whether a wait of w that its timer ended was for
// the lock key of c that is in fact free: released (its hash kept with no
// owner), whose release announced it, rather than held, or expired with a
// holder that died, for which nothing is published. Such a wait missed its
// wake-up, unless the release came just before the timer and its message
// is still on its way: countLost tells the two apart without holding up
// the next attempt.
func freeAfterTimer(ctx context.Context, c *Client, w *waitSet, primitive, name, key string) bool {
	owner, err := c.rc.Do(ctx, c.rc.B().Hget().Key(key).Field("owner").Build()).ToString()
	if err != nil || owner != "" {
		return false
	}
	wakes := make([]<-chan struct{}, len(w.subs))
	for i, s := range w.subs {
		wakes[i] = s.sema.Wait(w.gens[i])
	}
	countLost(c, wakes, primitive, name, key)
	return true
}

// countLost reports a lost wake-up (fellBack) of a wait that its timer
// ended although what it waited for had happened, unless one of wakes
// (the broadcasts it waited for) comes within messageGrace: a message
// published just before the timer, late rather than lost. The count comes
// then, from a timer, so the caller looks again at once.
func countLost(c *Client, wakes []<-chan struct{}, primitive, name, key string) {
	time.AfterFunc(messageGrace, func() {
		for _, wake := range wakes {
			select {
			case <-wake:
				return
			default:
			}
		}
		c.fellBack(primitive, name, key)
	})
}

// messageGrace is how long a message is given to come after what it
// announces was seen to have happened, before its wake-up counts as lost:
// it is published with the release, but travels on its own connection.
const messageGrace = 100 * time.Millisecond

// sleepAll sleeps for d, or until ctx ends (its error) or one of clients
// is closed (ErrClosed).
func sleepAll(ctx context.Context, clients []*Client, d time.Duration) error {
	var w waitSet
	_, err := w.wait(ctx, clients, d)
	return err
}

func recvCase(ch any) reflect.SelectCase {
	return reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)}
}

// watchClosed returns a context that also ends, with ErrClosed as its
// cause, when any of clients is closed, and that carries the grace of ctx's
// call (shareGrace). stop releases it. With one Client there is nothing to
// watch: its own waits watch it.
func watchClosed(ctx context.Context, clients []*Client) (context.Context, func()) {
	if len(clients) < 2 {
		return ctx, func() {}
	}
	actx, cancel := context.WithCancelCause(ctx)
	cases := []reflect.SelectCase{recvCase(actx.Done())}
	for _, c := range clients {
		cases = append(cases, recvCase(c.closed))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if i, _, _ := reflect.Select(cases); i > 0 {
			cancel(ErrClosed)
		}
	}()
	sctx, ended := shareGrace(ctx, actx)
	return sctx, func() {
		cancel(nil)
		<-done
		ended()
	}
}
