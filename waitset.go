package redisync

import (
	"context"
	"reflect"
	"slices"
	"time"

	"github.com/redisync/redisync/internal/sema"
)

// A Group or a Quorum that waits, waits for several locks at once, often
// through several Clients.
//
// It waits in a waitSet: one subscription per lock channel that blocked
// it, each woken through the wake-up semaphore of its subscription as a
// Mutex waiter is. A wake-up the group cannot use (it stopped waiting for
// that lock) is passed on to the next waiter of the lock, so that nobody
// sleeps through a release. The set selects over a number of channels
// known only at run time, hence reflect.Select.
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
	fresh []*subscription // joined since the last wait: not known to be in effect
	woken *subscription   // the one whose wake-up ended the last wait
}

// join subscribes to channel on c, unless the set already has it. It
// returns ctx's error when ctx ends first.
func (w *waitSet) join(ctx context.Context, c *Client, channel string) error {
	for _, s := range w.subs {
		if s.n.c == c && s.channel == channel {
			return nil
		}
	}
	s, err := c.notify.join(ctx, channel)
	if err != nil {
		return err
	}
	w.subs = append(w.subs, s)
	w.fresh = append(w.fresh, s)
	return nil
}

// wait blocks until a release wakes one of the subscriptions, for at most
// d. If subscriptions were joined since the last wait, it waits instead
// until they are in effect: a release published before was missed, so the
// caller looks again then. It returns ctx's error when ctx ends, ErrClosed
// when one of clients is closed.
func (w *waitSet) wait(ctx context.Context, clients []*Client, d time.Duration) error {
	w.woken = nil
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
				return waitErr(ctx, i)
			}
		}
		return nil
	}
	tickets := make([]*sema.Ticket, len(w.subs))
	cases := slices.Clip(base)
	for i, s := range w.subs {
		tickets[i] = s.sema.Wait()
		cases = append(cases, recvCase(tickets[i].C))
	}
	i, _, _ := reflect.Select(cases)
	for _, t := range tickets {
		t.Cancel() // passes on a wake-up received but not consumed
	}
	if i >= len(base) {
		w.woken = w.subs[i-len(base)]
		return nil
	}
	return waitErr(ctx, i)
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

// passOn hands the wake-up that ended the last wait on to another waiter of
// its channel: the caller did not take that lock, and whoever else waits for
// it must not sleep through its release. The caller leaves the channel
// first, so that the wake-up cannot come back to it, and joins it again if
// the lock blocks it again. It keeps the wake-up when the lock it came from
// (on c, channel) blocked the caller again: its new holder will announce
// its release.
func (w *waitSet) passOn(c *Client, channel string) {
	s := w.woken
	w.woken = nil
	if s == nil || (s.n.c == c && s.channel == channel) {
		return
	}
	w.subs = slices.DeleteFunc(w.subs, func(x *subscription) bool { return x == s })
	s.leave()
	s.sema.Release(1)
}

// leave drops every subscription of the set.
func (w *waitSet) leave() {
	for _, s := range w.subs {
		s.leave()
	}
	w.subs, w.fresh, w.woken = nil, nil, nil
}

// sleepAll sleeps for d, or until ctx ends (its error) or one of clients
// is closed (ErrClosed).
func sleepAll(ctx context.Context, clients []*Client, d time.Duration) error {
	var w waitSet
	return w.wait(ctx, clients, d)
}

func recvCase(ch any) reflect.SelectCase {
	return reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)}
}

// watchClosed returns a context that also ends, with ErrClosed as its
// cause, when any of clients is closed. stop releases it. With one Client
// there is nothing to watch: its own waits watch it.
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
	return actx, func() {
		cancel(nil)
		<-done
	}
}
