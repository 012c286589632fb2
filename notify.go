package redisync

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync/internal/sema"
)

// notifier wakes the waiters of a Client. It keeps one pub/sub subscription
// per lock channel that has local waiters, sharded (SSUBSCRIBE) where the
// server supports it, counted by reference and dropped when the last waiter
// leaves. Messages are fanned out to the waiters through a per-channel
// sema.Sema: a release message ("1") wakes one local waiter, a "*" message
// wakes all of them, "w:ID" wakes the waiter that expects ID (locks with a
// queue name the waiter at its head) and "g:ID TOKEN" tells it that the lock
// was handed to it with that token. When a subscription is re-established
// after the connection broke (messages sent meanwhile are lost), every
// waiter of it looks again.
type notifier struct {
	c       *Client
	classic atomic.Bool // the server has no sharded pub/sub

	mu      sync.Mutex
	subs    map[string]*subscription // live, by channel
	closing map[string]*subscription // being torn down, by channel
	closed  bool
	wg      sync.WaitGroup
}

// subscription is one channel's subscription and its waiters.
type subscription struct {
	n       *notifier
	channel string
	refs    int         // guarded by n.mu
	linger  *time.Timer // drops the subscription once idle; guarded by n.mu
	sema    sema.Sema

	ready    chan struct{} // closed at the first confirmation from the server
	confirms atomic.Int64

	tmu     sync.Mutex
	targets map[string]chan string // waiters woken by name: "" or a token

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns
	gone   chan struct{} // closed when the server subscription is dropped
}

func newNotifier(c *Client) *notifier {
	return &notifier{c: c, subs: make(map[string]*subscription), closing: make(map[string]*subscription)}
}

// join adds a waiter to the channel's subscription, subscribing first when
// it has none. The waiter must call leave. Ready tells when messages flow.
func (n *notifier) join(channel string) (*subscription, error) {
	n.mu.Lock()
	for {
		if n.closed {
			n.mu.Unlock()
			return nil, ErrClosed
		}
		if s := n.subs[channel]; s != nil {
			s.refs++
			s.sema.Join()
			n.mu.Unlock()
			return s, nil
		}
		old := n.closing[channel]
		if old == nil {
			break
		}
		// Subscribing again before the old subscription is dropped would let
		// its UNSUBSCRIBE end the new one.
		n.mu.Unlock()
		<-old.gone
		n.mu.Lock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &subscription{
		n: n, channel: channel, refs: 1,
		ready: make(chan struct{}), ctx: ctx, cancel: cancel,
		done: make(chan struct{}), gone: make(chan struct{}),
	}
	s.sema.Join()
	n.subs[channel] = s
	n.wg.Add(1)
	go s.run()
	if f := n.c.cfg.metrics.Subscribed; f != nil {
		f(1)
	}
	n.mu.Unlock()
	return s, nil
}

// subscriptionLinger is how long a subscription outlives its last waiter:
// a lock waited for again soon does not pay for unsubscribing and
// subscribing again.
const subscriptionLinger = 2 * time.Second

// leave removes a waiter added by join; the subscription is dropped, in the
// background, subscriptionLinger after the last one left unless another
// joined meanwhile.
func (s *subscription) leave() {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	s.refs--
	s.sema.Leave()
	if s.refs > 0 || n.subs[s.channel] != s {
		return
	}
	if s.linger == nil {
		s.linger = time.AfterFunc(subscriptionLinger, s.dropIdle)
	} else {
		s.linger.Reset(subscriptionLinger)
	}
}

// dropIdle drops the subscription if no waiter joined it since the last
// one left.
func (s *subscription) dropIdle() {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if s.refs > 0 || n.subs[s.channel] != s {
		return
	}
	delete(n.subs, s.channel)
	n.closing[s.channel] = s
	n.wg.Add(1)
	go s.drop()
}

// drop ends the subscription: stop receiving, then unsubscribe on the
// server, whatever state the subscribe was in.
func (s *subscription) drop() {
	n := s.n
	defer n.wg.Done()
	s.cancel()
	<-s.done
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	var cmd rueidis.Completed
	if n.classic.Load() {
		cmd = n.c.rc.B().Unsubscribe().Channel(s.channel).Build()
	} else {
		cmd = n.c.rc.B().Sunsubscribe().Channel(s.channel).Build()
	}
	if err := n.c.rc.Do(ctx, cmd).Error(); err != nil && !isClosing(err) {
		n.c.log.Warn("redisync: unsubscribe failed", "channel", s.channel, "err", err)
	}
	cancel()
	n.mu.Lock()
	if n.closing[s.channel] == s {
		delete(n.closing, s.channel)
	}
	n.mu.Unlock()
	close(s.gone)
	if f := n.c.cfg.metrics.Subscribed; f != nil {
		f(-1)
	}
}

// run keeps the subscription up until it is dropped.
func (s *subscription) run() {
	n := s.n
	defer n.wg.Done()
	defer close(s.done)
	retry := backoff{first: 10 * time.Millisecond, limit: time.Second}
	failures := retryLog{log: n.c.log, msg: "redisync: subscription broken"}
	for {
		classic := n.classic.Load()
		var cmd rueidis.Completed
		if classic {
			cmd = n.c.rc.B().Subscribe().Channel(s.channel).Build()
		} else {
			cmd = n.c.rc.B().Ssubscribe().Channel(s.channel).Build()
		}
		before := s.confirms.Load()
		// rueidis resubscribes by itself when the connection breaks, but
		// with a delay that grows with every break in the same Receive call,
		// up to a second, and messages are lost meanwhile. A Receive call is
		// therefore ended at its first resubscription and made again, so
		// that every break is retried as promptly as the first.
		rctx, restart := context.WithCancel(s.ctx)
		hook := func(ps rueidis.PubSubSubscription) {
			if s.confirmed(ps) && s.confirms.Load() > before+1 {
				restart()
			}
		}
		err := n.c.rc.Receive(rueidis.WithOnSubscriptionHook(rctx, hook), cmd, s.message)
		restarted := rctx.Err() != nil
		restart()
		if s.ctx.Err() != nil {
			return
		}
		if restarted {
			retry.reset()
			failures.succeeded("channel", s.channel)
			continue
		}
		if err != nil && !classic && isUnknownCommand(err) {
			n.classic.Store(true)
			continue
		}
		if s.confirms.Load() > before {
			retry.reset()
			failures.succeeded("channel", s.channel)
		}
		if err != nil {
			failures.failed("channel", s.channel, "err", err)
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(retry.next()):
		}
	}
}

// confirmed counts a confirmation of the subscription and reports whether
// ps was one. It runs in the connection's reader: it must not block.
func (s *subscription) confirmed(ps rueidis.PubSubSubscription) bool {
	if ps.Channel != s.channel || (ps.Kind != "subscribe" && ps.Kind != "ssubscribe") {
		return false
	}
	if s.confirms.Add(1) == 1 {
		close(s.ready)
		return true
	}
	// Resubscribed: messages may have been lost meanwhile.
	s.wakeAll()
	return true
}

// wakeAll makes every waiter of the subscription look again.
func (s *subscription) wakeAll() {
	s.sema.ReleaseAll()
	s.tmu.Lock()
	for _, ch := range s.targets {
		signal(ch, "")
	}
	s.tmu.Unlock()
}

// wakeAll makes every local waiter of channel look again.
func (n *notifier) wakeAll(channel string) {
	n.mu.Lock()
	s := n.subs[channel]
	n.mu.Unlock()
	if s != nil {
		s.wakeAll()
	}
}

// message runs in the connection's reader: it must not block.
func (s *subscription) message(m rueidis.PubSubMessage) {
	switch {
	case m.Message == "*":
		s.sema.ReleaseAll()
	case strings.HasPrefix(m.Message, "w:"):
		s.target(m.Message[2:], "")
	case strings.HasPrefix(m.Message, "g:"):
		id, token, _ := strings.Cut(m.Message[2:], " ")
		s.target(id, token)
	default:
		s.sema.Release(1)
	}
}

// target signals the waiter id with v: "" wakes it, a token tells it that
// the lock is its own. A waiter of another Client now holds the lock, or is
// about to take it: if it died meanwhile, the lock is free again within its
// waiter expiry, and the Client looks then. It runs in the connection's
// reader: it must not block.
func (s *subscription) target(id, v string) {
	s.tmu.Lock()
	ch := s.targets[id]
	if ch != nil {
		signal(ch, v)
	}
	s.tmu.Unlock()
	if ch == nil {
		s.n.c.presence.changedHands(s.channel)
	}
}

// expect returns the channel that "w:id" and "g:id TOKEN" messages signal:
// it receives "" for a wake-up, TOKEN when the lock was handed over. A
// signal sent while nobody was receiving is kept for the next receive; a
// wake-up never displaces a token.
func (s *subscription) expect(id string) <-chan string {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if s.targets == nil {
		s.targets = make(map[string]chan string)
	}
	ch := s.targets[id]
	if ch == nil {
		ch = make(chan string, 1)
		s.targets[id] = ch
	}
	return ch
}

// forget drops what expect registered.
func (s *subscription) forget(id string) {
	s.tmu.Lock()
	delete(s.targets, id)
	s.tmu.Unlock()
}

// signal sends v on ch unless a signal is pending; a token replaces a
// pending wake-up.
func signal(ch chan string, v string) {
	select {
	case ch <- v:
		return
	default:
	}
	if v == "" {
		return
	}
	select {
	case old := <-ch:
		if old != "" {
			v = old
		}
	default:
	}
	select {
	case ch <- v:
	default:
	}
}

// close drops every subscription and waits for the goroutines.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	var live []*subscription
	for ch, s := range n.subs {
		if s.linger != nil {
			s.linger.Stop()
		}
		delete(n.subs, ch)
		n.closing[ch] = s
		live = append(live, s)
	}
	n.wg.Add(len(live))
	n.mu.Unlock()
	for _, s := range live {
		go s.drop()
	}
	n.wg.Wait()
}

func isUnknownCommand(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.Contains(strings.ToLower(re.Error()), "unknown command")
}

func isClosing(err error) bool {
	return err == rueidis.ErrClosing
}
