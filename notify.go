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
// leaves. "w:ID" wakes the waiter that expects ID (locks with a queue name
// the waiter at its head) and "g:ID TOKEN" tells it that the lock was handed
// to it with that token. These two go to the waiter's Client alone, on a
// channel of its own (waiterChannel). Every other message is a broadcast to
// all the local waiters of the channel: "*" (a latch opened, an RWMutex let
// its readers in) and "1" (a lock that Groups and Quorums wait for was
// released: look again). When a subscription is re-established after the
// connection broke (messages sent meanwhile are lost), every waiter of it
// looks again.
//
// The Redisson locks (redisson_wait.go) wait on Redisson's channels, on the
// pub/sub its publishers use: a subscription is of a kind (pubsubKind),
// classic or sharded for those channels, whatever the server prefers, and
// every message on them, whatever it says ("0", "1", a number of permits),
// is a broadcast to the channel's local waiters.
//
// Messages are for latency, never for liveness: every waiter also looks
// again when a timer of its own ends (the holder's lease, a refresh
// interval), and a message only makes it look sooner. Broadcasts wake by
// generation (sema.Sema): a waiter reads its subscription's generation
// before the attempt that found the lock taken, and its wait ends at once
// if a broadcast came since. A broadcast thus reaches every local waiter it
// was meant for, and no other goroutine can take it.
//
// The subscriptions share connections of their own (rueidis dedicated
// connections with pub/sub hooks), whatever their number: one, a link, for
// the server or the Sentinel primary, one per master on Cluster, each with
// a goroutine that keeps it up (link.go). On Cluster a channel is
// subscribed on the master of its slot: the notifier reads the slot map
// from a node, follows MOVED replies, and reads the map again when a master
// cannot be reached or drops the channels of a slot it no longer serves
// (route.go).
type notifier struct {
	c       *Client
	classic atomic.Bool // the server has no sharded pub/sub

	ctx    context.Context // ends at close
	cancel context.CancelFunc

	mu      sync.Mutex
	subs    map[subKey]*subscription // live
	closing map[subKey]*subscription // being unsubscribed
	links   map[string]*link         // by node address; "" outside Cluster
	closed  bool
	wg      sync.WaitGroup

	// Cluster only.
	slots   []slotRange       // the slot map as last read
	moved   map[uint16]string // masters learnt from MOVED since
	stale   bool              // the map needs reading again
	routing bool              // route runs
}

// A pubsubKind is the pub/sub a subscription listens on.
type pubsubKind uint8

const (
	// ownPubSub is for the library's own channels: sharded pub/sub where
	// the server has it, classic elsewhere (learnt at the first
	// SSUBSCRIBE).
	ownPubSub pubsubKind = iota
	// classicPubSub is SUBSCRIBE, whatever the server has: for Redisson's
	// channels where its publishers PUBLISH.
	classicPubSub
	// shardedPubSub is SSUBSCRIBE: for Redisson's channels where its
	// publishers SPUBLISH.
	shardedPubSub
)

// pubsubKinds are the kinds of pub/sub a channel may be subscribed on.
var pubsubKinds = [...]pubsubKind{ownPubSub, classicPubSub, shardedPubSub}

// subKey names a subscription: a channel on one kind of pub/sub. A Client
// has at most one subscription per key.
type subKey struct {
	channel string
	kind    pubsubKind
}

// subscription is one channel's subscription and its waiters.
type subscription struct {
	n       *notifier
	channel string
	kind    pubsubKind
	refs    int // guarded by n.mu
	// probe, when set, is what the Client's presence pass reads for the
	// waiters of the channel that have no place in a queue (see follow);
	// probed is what it read last. Guarded by n.mu.
	probe  probe
	probed *string
	linger *time.Timer // drops the subscription once idle; guarded by n.mu
	sema   sema.Sema   // the broadcasts' generations

	// Guarded by n.mu.
	link    *link // where it is subscribed, or to be; nil until routed
	sending bool  // link is subscribing it
	sent    bool  // subscribed on link's current connection, as confirmed
	classic bool  // with SUBSCRIBE, when sent

	ready    chan struct{} // closed at the first confirmation from the server
	confirms atomic.Int64

	tmu     sync.Mutex
	targets map[string]chan string // waiters woken by name: "" or a token

	gone chan struct{} // closed when the server subscription is dropped
}

func newNotifier(c *Client) *notifier {
	ctx, cancel := context.WithCancel(context.Background())
	return &notifier{
		c: c, ctx: ctx, cancel: cancel,
		subs: make(map[subKey]*subscription), closing: make(map[subKey]*subscription),
		links: make(map[string]*link),
	}
}

// key is what the notifier files the subscription under.
func (s *subscription) key() subKey { return subKey{s.channel, s.kind} }

// join adds a waiter to the subscription of channel on the kind of pub/sub,
// subscribing first when there is none. The waiter must call leave. Ready
// tells when messages flow. It returns ctx's error, having joined nothing,
// when ctx ends while an old subscription of the channel is being dropped.
func (n *notifier) join(ctx context.Context, channel string, kind pubsubKind) (*subscription, error) {
	k := subKey{channel, kind}
	n.mu.Lock()
	for {
		if n.closed {
			n.mu.Unlock()
			return nil, ErrClosed
		}
		if s := n.subs[k]; s != nil {
			s.refs++
			n.mu.Unlock()
			return s, nil
		}
		old := n.closing[k]
		if old == nil {
			break
		}
		// Subscribing again before the old subscription is dropped would let
		// its UNSUBSCRIBE end the new one.
		n.mu.Unlock()
		select {
		case <-old.gone:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		n.mu.Lock()
	}
	s := &subscription{
		n: n, channel: channel, kind: kind, refs: 1,
		ready: make(chan struct{}), gone: make(chan struct{}),
	}
	n.subs[k] = s
	n.place(s)
	if f := n.c.cfg.metrics.Subscribed; f != nil {
		f(1)
	}
	n.mu.Unlock()
	return s, nil
}

// joinLive joins the subscription of channel on the kind of pub/sub when
// messages flow on it already (other waiters', or one lingering after its
// last waiter), and returns nil otherwise. A waiter that joins before its
// first attempt can expect its message at once, without an attempt more
// once subscribed.
func (n *notifier) joinLive(channel string, kind pubsubKind) *subscription {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.subs[subKey{channel, kind}]
	if n.closed || s == nil {
		return nil
	}
	select {
	case <-s.ready:
	default:
		return nil
	}
	s.refs++
	return s
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
	if s.refs > 0 || !n.live(s) {
		return
	}
	if s.linger == nil {
		s.linger = time.AfterFunc(subscriptionLinger, s.dropIdle)
	} else {
		s.linger.Reset(subscriptionLinger)
	}
}

// dropIdle drops the subscription if no waiter joined it since the last
// one left: its link unsubscribes it.
func (s *subscription) dropIdle() {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if s.refs > 0 || !n.live(s) {
		return
	}
	delete(n.subs, s.key())
	n.closing[s.key()] = s
	if s.link == nil {
		n.finish(s)
		return
	}
	s.link.poke()
}

// live reports whether s is its key's live subscription, not one dropped.
// The caller holds n.mu.
func (n *notifier) live(s *subscription) bool { return n.subs[s.key()] == s }

// finish ends a dropped subscription that the server no longer holds. The
// caller holds n.mu.
func (n *notifier) finish(s *subscription) {
	if n.closing[s.key()] == s {
		delete(n.closing, s.key())
	}
	if s.link != nil {
		delete(s.link.subs, s)
		s.link = nil
	}
	close(s.gone)
	if f := n.c.cfg.metrics.Subscribed; f != nil {
		f(-1)
	}
}

// confirmed counts a confirmation of the subscription: the first makes it
// ready, the next ones (a resubscription: messages may have been lost
// meanwhile) wake every waiter. It must not block.
func (s *subscription) confirmed() {
	if s.confirms.Add(1) == 1 {
		close(s.ready)
		return
	}
	s.wakeAll()
}

// wakeAll makes every waiter of the subscription look again.
func (s *subscription) wakeAll() {
	s.sema.Broadcast()
	s.tmu.Lock()
	for _, ch := range s.targets {
		signal(ch, "")
	}
	s.tmu.Unlock()
}

// A probe is one command that reads what the waiters of a subscription
// wait for, such as the owner of a lock or the generation of a latch: the
// empty string (or no value) when it is free, and something that changes
// whenever it may have become free for them.
type probe func(rc rueidis.Client) rueidis.Completed

// follow has the Client's presence pass read p for the waiters of the
// subscription, once per pass while it has waiters: the waiters that have
// no place in a queue (Groups and Quorums on a Mutex, Latch waiters, the
// Redisson locks' waiters) learn within one pass what a lost message would
// have told them. The first probe given to the subscription is kept.
func (s *subscription) follow(p probe) {
	n := s.n
	n.mu.Lock()
	if s.probe == nil {
		s.probe = p
	}
	n.mu.Unlock()
	n.c.presence.follow()
}

// following reports whether a subscription with waiters has a probe for
// the presence pass to read: the pass then runs, with or without places
// in queues to renew.
func (n *notifier) following() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range n.subs {
		if s.probe != nil && s.refs > 0 {
			return true
		}
	}
	return false
}

// followed returns the subscriptions with waiters whose probe the presence
// pass reads.
func (n *notifier) followed() []*subscription {
	n.mu.Lock()
	defer n.mu.Unlock()
	var subs []*subscription
	for _, s := range n.subs {
		if s.probe != nil && s.refs > 0 {
			subs = append(subs, s)
		}
	}
	return subs
}

// probedAs records what a presence pass read of the subscription's probe,
// and reports whether its waiters must look again: it reads free, it
// changed since the previous pass, or it is the first read: what changed
// between the waiters' last attempts and that read (a latch opened, a
// semaphore's permits set, without a message) has nothing to be told from.
func (s *subscription) probedAs(v string) bool {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	changed := s.probed == nil || *s.probed != v
	s.probed = &v
	return v == "" || changed
}

// wakeAll makes every local waiter of the library's channel look again.
func (n *notifier) wakeAll(channel string) {
	n.mu.Lock()
	s := n.subs[subKey{channel, ownPubSub}]
	n.mu.Unlock()
	if s != nil {
		s.wakeAll()
	}
}

// wake wakes the local waiter id of the library's channel, if it waits: the
// presence pass found the lock handed over to it.
func (n *notifier) wake(channel, id string) {
	n.mu.Lock()
	s := n.subs[subKey{channel, ownPubSub}]
	n.mu.Unlock()
	if s != nil {
		s.target(id, "")
	}
}

// waiterChannel is where the releases of a lock whose channel is channel
// name the waiters of the Client clientID, handing the lock over or waking
// them (tell in the scripts): a Client hears its own waiters' messages
// only, however many Clients wait.
func waiterChannel(channel, clientID string) string { return channel + ":" + clientID }

// message hands a message to the channel's subscriptions. A message does
// not say which kind of pub/sub brought it: each subscription of the
// channel gets it. It runs in a connection's reader: it must not block.
func (n *notifier) message(m rueidis.PubSubMessage) {
	var subs [len(pubsubKinds)]*subscription
	n.mu.Lock()
	for i, kind := range pubsubKinds {
		subs[i] = n.subs[subKey{m.Channel, kind}]
	}
	n.mu.Unlock()
	for _, s := range subs {
		if s != nil {
			s.message(m)
		}
	}
}

// message must not block.
func (s *subscription) message(m rueidis.PubSubMessage) {
	if s.kind != ownPubSub {
		// Redisson's channels: every message says "look again".
		s.sema.Broadcast()
		return
	}
	switch {
	case strings.HasPrefix(m.Message, "w:"):
		s.target(m.Message[2:], "")
	case strings.HasPrefix(m.Message, "g:"):
		id, token, _ := strings.Cut(m.Message[2:], " ")
		s.target(id, token)
	default:
		// "*" and "1": every local waiter of the channel looks again.
		s.sema.Broadcast()
	}
}

// target signals the waiter id with v: "" wakes it, a token tells it that
// the lock is its own. A waiter that is gone has left the queue, giving
// back what was handed to it. It must not block.
func (s *subscription) target(id, v string) {
	s.tmu.Lock()
	if ch := s.targets[id]; ch != nil {
		signal(ch, v)
	}
	s.tmu.Unlock()
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

// close drops every subscription: the links close their connections, which
// ends the subscriptions on the server, and their goroutines end.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	for k, s := range n.subs {
		if s.linger != nil {
			s.linger.Stop()
		}
		delete(n.subs, k)
		n.closing[k] = s
	}
	n.mu.Unlock()
	n.cancel()
	n.wg.Wait()
	n.mu.Lock()
	for _, s := range n.closing {
		n.finish(s)
	}
	n.mu.Unlock()
}
