package redisync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
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
//
// The subscriptions share connections of their own (rueidis dedicated
// connections with pub/sub hooks), whatever their number: one, a link, for
// the server or the Sentinel primary, one per master on Cluster, each with
// a goroutine that keeps it up. On Cluster a channel is subscribed on the
// master of its slot: the notifier reads the slot map from a node, follows
// MOVED replies, and reads the map again when a master cannot be reached or
// drops the channels of a slot it no longer serves.
type notifier struct {
	c       *Client
	classic atomic.Bool // the server has no sharded pub/sub

	ctx    context.Context // ends at close
	cancel context.CancelFunc

	mu      sync.Mutex
	subs    map[string]*subscription // live, by channel
	closing map[string]*subscription // being unsubscribed, by channel
	links   map[string]*link         // by node address; "" outside Cluster
	closed  bool
	wg      sync.WaitGroup

	// Cluster only.
	slots   []slotRange       // the slot map as last read
	moved   map[uint16]string // masters learnt from MOVED since
	stale   bool              // the map needs reading again
	routing bool              // route runs
}

// slotRange is a range of Cluster slots and the address of their master.
type slotRange struct {
	first, last uint16
	addr        string
}

// subscription is one channel's subscription and its waiters.
type subscription struct {
	n       *notifier
	channel string
	refs    int         // guarded by n.mu
	linger  *time.Timer // drops the subscription once idle; guarded by n.mu
	sema    sema.Sema

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

// link is one pub/sub connection. Its goroutine dials it, subscribes and
// unsubscribes the channels routed to it, dials again when it breaks and
// resubscribes them all, and ends, closing it, once no channel is left.
type link struct {
	n    *notifier
	addr string        // the master's on Cluster, "" otherwise
	kick chan struct{} // something changed in subs
	// Guarded by n.mu.
	subs  map[*subscription]struct{} // routed here: live, or dropped and still subscribed
	conn  int64                      // the current connection's number, 0 while down
	dials int64
}

func newNotifier(c *Client) *notifier {
	ctx, cancel := context.WithCancel(context.Background())
	return &notifier{
		c: c, ctx: ctx, cancel: cancel,
		subs: make(map[string]*subscription), closing: make(map[string]*subscription),
		links: make(map[string]*link),
	}
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
	s := &subscription{
		n: n, channel: channel, refs: 1,
		ready: make(chan struct{}), gone: make(chan struct{}),
	}
	s.sema.Join()
	n.subs[channel] = s
	n.place(s)
	if f := n.c.cfg.metrics.Subscribed; f != nil {
		f(1)
	}
	n.mu.Unlock()
	return s, nil
}

// joinLive joins the channel's subscription when messages flow on it
// already (other waiters', or one lingering after its last waiter), and
// returns nil otherwise. A waiter that joins before its first attempt can
// expect its message at once, without an attempt more once subscribed.
func (n *notifier) joinLive(channel string) *subscription {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.subs[channel]
	if n.closed || s == nil {
		return nil
	}
	select {
	case <-s.ready:
	default:
		return nil
	}
	s.refs++
	s.sema.Join()
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
// one left: its link unsubscribes it.
func (s *subscription) dropIdle() {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if s.refs > 0 || n.subs[s.channel] != s {
		return
	}
	delete(n.subs, s.channel)
	n.closing[s.channel] = s
	if s.link == nil {
		n.finish(s)
		return
	}
	s.link.poke()
}

// finish ends a dropped subscription that the server no longer holds. The
// caller holds n.mu.
func (n *notifier) finish(s *subscription) {
	if n.closing[s.channel] == s {
		delete(n.closing, s.channel)
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

// place routes a new subscription to the link of its node: the only one
// outside Cluster, the master of its slot on Cluster, once known. The
// caller holds n.mu.
func (n *notifier) place(s *subscription) {
	if !n.c.cluster {
		n.attach(s, "")
		return
	}
	if addr, ok := n.master(slotHash(s.channel)); ok && !n.stale {
		n.attach(s, addr)
		return
	}
	n.reroute(false)
}

// attach routes s to the link of addr, which it starts if need be. The
// caller holds n.mu.
func (n *notifier) attach(s *subscription, addr string) {
	l := n.links[addr]
	if l == nil {
		l = &link{n: n, addr: addr, kick: make(chan struct{}, 1), subs: make(map[*subscription]struct{})}
		n.links[addr] = l
		n.wg.Add(1)
		go l.run()
	}
	s.link, s.sent = l, false
	l.subs[s] = struct{}{}
	l.poke()
}

// detach takes s, which is not subscribed, off its link. The caller holds
// n.mu.
func (n *notifier) detach(s *subscription) {
	if s.link != nil {
		delete(s.link.subs, s)
		s.link.poke()
	}
	s.link, s.sent = nil, false
}

// master returns the master of slot, as last learnt. The caller holds n.mu.
func (n *notifier) master(slot uint16) (string, bool) {
	if addr, ok := n.moved[slot]; ok {
		return addr, true
	}
	for _, r := range n.slots {
		if r.first <= slot && slot <= r.last {
			return r.addr, true
		}
	}
	return "", false
}

// reroute has the slot map read (again, when stale) and the subscriptions
// waiting for a master routed. The caller holds n.mu.
func (n *notifier) reroute(stale bool) {
	n.stale = n.stale || stale
	if n.routing || n.closed {
		return
	}
	n.routing = true
	n.wg.Add(1)
	go n.route()
}

// route reads the Cluster's slot map and moves every subscription that is
// not subscribed to the link of its slot's master, until none waits for one
// and the map is not stale.
func (n *notifier) route() {
	defer n.wg.Done()
	retry := backoff{first: 10 * time.Millisecond, limit: time.Second}
	failures := retryLog{log: n.c.log, msg: "redisync: reading the Cluster's slots failed"}
	for {
		n.mu.Lock()
		n.stale = false
		n.mu.Unlock()
		slots, err := n.readSlots()
		n.mu.Lock()
		if err == nil {
			failures.succeeded()
			n.slots, n.moved = slots, nil
			for _, s := range n.subs {
				if s.sent || s.sending {
					continue
				}
				if addr, ok := n.master(slotHash(s.channel)); ok && (s.link == nil || s.link.addr != addr) {
					n.detach(s)
					n.attach(s, addr)
				}
			}
		} else {
			failures.failed("err", err)
		}
		done := err == nil && !n.stale
		for _, s := range n.subs {
			done = done && s.link != nil
		}
		if done || n.closed {
			n.routing = false
			n.mu.Unlock()
			return
		}
		n.mu.Unlock()
		if !pause(n.ctx, nil, nil, retry.next()) {
			return
		}
	}
}

// readSlots reads the slot map from the first node that answers.
func (n *notifier) readSlots() ([]slotRange, error) {
	nodes := n.c.rc.Nodes()
	addrs := make([]string, 0, len(nodes))
	for addr := range nodes {
		addrs = append(addrs, addr)
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	err := errors.New("no node known")
	for _, addr := range addrs {
		node := nodes[addr]
		ctx, cancel := context.WithTimeout(n.ctx, time.Second)
		var v []rueidis.RedisMessage
		v, err = node.Do(ctx, node.B().ClusterSlots().Build()).ToArray()
		cancel()
		if err == nil {
			return parseSlotMap(v, addr), nil
		}
	}
	return nil, err
}

// parseSlotMap reads a CLUSTER SLOTS reply from the node at from.
func parseSlotMap(v []rueidis.RedisMessage, from string) []slotRange {
	fromHost, _, _ := net.SplitHostPort(from)
	var out []slotRange
	for _, r := range v {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			continue
		}
		first, err1 := f[0].AsInt64()
		last, err2 := f[1].AsInt64()
		node, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(node) < 2 {
			continue
		}
		host, _ := node[0].ToString()
		port, err := node[1].AsInt64()
		if err != nil || host == "?" {
			continue
		}
		if host == "" {
			host = fromHost
		}
		out = append(out, slotRange{first: uint16(first), last: uint16(last), addr: net.JoinHostPort(host, strconv.FormatInt(port, 10))})
	}
	return out
}

// poke tells the link's goroutine that its subscriptions changed.
func (l *link) poke() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// run keeps the link's connection up while it has subscriptions.
func (l *link) run() {
	n := l.n
	defer n.wg.Done()
	var dc rueidis.DedicatedClient
	var broken <-chan error
	defer func() { l.hangup(dc) }()
	// Behind Sentinel, rueidis moves its connections to a new primary, but
	// not a connection of one's own: the link follows by itself.
	var primary string
	var follow <-chan time.Time
	if n.c.rc.Mode() == rueidis.ClientModeSentinel {
		t := time.NewTicker(primaryCheck)
		defer t.Stop()
		follow = t.C
	}
	// A connection that breaks is dialled again at once (after a short
	// jittered pause), however many breaks came before: messages are lost
	// while it is down.
	retry := backoff{first: 10 * time.Millisecond, limit: time.Second}
	failures := retryLog{log: n.c.log, msg: "redisync: subscription broken"}
	failed := func(err error) bool {
		l.hangup(dc)
		dc = nil
		failures.failed("addr", l.addr, "err", err)
		return pause(n.ctx, l.kick, l.settle, retry.next())
	}
	for {
		if l.settle() {
			return
		}
		if dc == nil {
			if follow != nil {
				primary = n.primary()
			}
			var err error
			if dc, broken, err = l.dial(); err != nil {
				if n.c.cluster {
					// The master may be gone: read the slot map again.
					n.mu.Lock()
					n.reroute(true)
					n.mu.Unlock()
				}
				if !failed(err) {
					return
				}
				continue
			}
		}
		again, refused, err := l.sync(dc)
		switch {
		case err != nil:
			if !failed(err) {
				return
			}
			continue
		case again:
			continue
		case refused != nil:
			failures.failed("addr", l.addr, "err", refused)
			if !pause(n.ctx, l.kick, l.settle, retry.next()) {
				return
			}
			continue
		}
		retry.reset()
		failures.succeeded("addr", l.addr)
		select {
		case <-l.kick:
		case err := <-broken:
			if err == nil {
				err = errConnClosed
			}
			if !failed(err) {
				return
			}
		case <-follow:
			if p := n.primary(); p != primary {
				n.c.log.Info("redisync: subscriptions move to the new primary", "primary", p)
				l.hangup(dc)
				dc = nil
			}
		case <-n.ctx.Done():
			return
		}
	}
}

// primaryCheck is how often a link behind Sentinel looks whether the
// primary changed.
const primaryCheck = time.Second

// primary names where the rueidis client sends commands: its primary
// (and replica), behind Sentinel.
func (n *notifier) primary() string {
	var addrs []string
	for addr := range n.c.rc.Nodes() {
		addrs = append(addrs, addr)
	}
	slices.Sort(addrs)
	return strings.Join(addrs, " ")
}

var errConnClosed = errors.New("redisync: connection closed")

// pause waits for d and reports true, or false once ctx ends or, on each
// kick, done reports true.
func pause(ctx context.Context, kick <-chan struct{}, done func() bool, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		case <-kick:
			if done() {
				return false
			}
		}
	}
}

// settle finishes the dropped subscriptions that the connection does not
// hold, and reports whether the link has none left: it is then forgotten,
// and its goroutine ends.
func (l *link) settle() bool {
	n := l.n
	n.mu.Lock()
	defer n.mu.Unlock()
	for s := range l.subs {
		if n.subs[s.channel] != s && !s.sent {
			n.finish(s)
		}
	}
	if len(l.subs) > 0 {
		return false
	}
	if n.links[l.addr] == l {
		delete(n.links, l.addr)
	}
	return true
}

// errNoNode is a Cluster master that the rueidis client has no connection
// to (yet).
var errNoNode = errors.New("redisync: no connection to the node")

// dial opens a connection of its own to the link's node, with the link's
// pub/sub hooks. The channel it returns reports the connection's end.
func (l *link) dial() (rueidis.DedicatedClient, <-chan error, error) {
	n := l.n
	rc := n.c.rc
	if n.c.cluster {
		if rc = rc.Nodes()[l.addr]; rc == nil {
			l.introduce()
			return nil, nil, fmt.Errorf("%w %s", errNoNode, l.addr)
		}
	}
	dc, _ := rc.Dedicate()
	n.mu.Lock()
	l.dials++
	conn := l.dials
	l.conn = conn
	n.mu.Unlock()
	broken := dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage:      n.message,
		OnSubscription: func(ps rueidis.PubSubSubscription) { l.subscription(conn, ps) },
	})
	select {
	case err := <-broken:
		l.hangup(dc)
		if err == nil {
			err = errConnClosed
		}
		return nil, nil, err
	default:
	}
	return dc, broken, nil
}

// introduce sends a read of one of the link's channel names through the
// Cluster client, routed by its slot map: a MOVED reply to it makes the
// client connect to the master the link is for.
func (l *link) introduce() {
	n := l.n
	n.mu.Lock()
	var channel string
	for s := range l.subs {
		channel = s.channel
		break
	}
	n.mu.Unlock()
	if channel == "" {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, time.Second)
	defer cancel()
	n.c.rc.Do(ctx, n.c.rc.B().Exists().Key(channel).Build())
}

// hangup closes the link's connection, if any: nothing is subscribed on
// the link any more.
func (l *link) hangup(dc rueidis.DedicatedClient) {
	if dc == nil {
		return
	}
	n := l.n
	n.mu.Lock()
	l.conn = 0
	for s := range l.subs {
		s.sent = false
	}
	n.mu.Unlock()
	dc.Close()
}

// sync subscribes, in one pipeline, the link's live subscriptions that are
// not subscribed on the connection and unsubscribes the dropped ones. It
// returns again when there is more to send at once, the Redis error of a
// subscription that is to be retried later, and the connection's failure.
func (l *link) sync(dc rueidis.DedicatedClient) (again bool, refused, err error) {
	n := l.n
	classic := n.classic.Load()
	var subs, unsubs []*subscription
	var cmds rueidis.Commands
	n.mu.Lock()
	for s := range l.subs {
		switch live := n.subs[s.channel] == s; {
		case live && !s.sent:
			s.sending = true
			subs = append(subs, s)
		case !live && s.sent:
			unsubs = append(unsubs, s)
		}
	}
	n.mu.Unlock()
	if len(subs)+len(unsubs) == 0 {
		return false, nil, nil
	}
	for _, s := range subs {
		if classic {
			cmds = append(cmds, dc.B().Subscribe().Channel(s.channel).Build())
		} else {
			cmds = append(cmds, dc.B().Ssubscribe().Channel(s.channel).Build())
		}
	}
	for _, s := range unsubs {
		if s.classic {
			cmds = append(cmds, dc.B().Unsubscribe().Channel(s.channel).Build())
		} else {
			cmds = append(cmds, dc.B().Sunsubscribe().Channel(s.channel).Build())
		}
	}
	results := dc.DoMulti(n.ctx, cmds...)

	n.mu.Lock()
	defer n.mu.Unlock()
	for i, s := range subs {
		s.sending = false
		rerr := results[i].Error()
		re, isRedis := rueidis.IsRedisErr(rerr)
		switch {
		case rerr == nil:
			// The confirmation, handled by the hook, came before.
		case !isRedis:
			err = rerr
		case !classic && isUnknownCommand(rerr):
			n.classic.Store(true)
			again = true
		default:
			if addr, moved := re.IsMoved(); moved && n.c.cluster && addr != l.addr {
				if n.moved == nil {
					n.moved = make(map[uint16]string)
				}
				n.moved[slotHash(s.channel)] = addr
				if s.link == l && n.subs[s.channel] == s {
					n.detach(s)
					n.attach(s, addr)
				}
				continue
			}
			refused = fmt.Errorf("subscribing to %s: %w", s.channel, rerr)
		}
	}
	for i, s := range unsubs {
		rerr := results[len(subs)+i].Error()
		if _, isRedis := rueidis.IsRedisErr(rerr); isRedis {
			n.c.log.Warn("redisync: unsubscribe failed", "channel", s.channel, "err", rerr)
		} else if rerr != nil {
			err = rerr // the connection's end dropped it anyway
		}
		if s.link == l {
			n.finish(s)
		}
	}
	return again, refused, err
}

// subscription handles a subscribe or unsubscribe event of the link's
// connection number conn: what the connection holds is known from these
// events, in the order the server sent them. It runs in the connection's
// reader: it must not block.
func (l *link) subscription(conn int64, ps rueidis.PubSubSubscription) {
	n := l.n
	n.mu.Lock()
	s := n.subs[ps.Channel]
	live := s != nil
	if !live {
		s = n.closing[ps.Channel]
	}
	if s == nil || s.link != l || l.conn != conn {
		n.mu.Unlock()
		return
	}
	switch ps.Kind {
	case "subscribe", "ssubscribe":
		s.sent, s.classic = true, ps.Kind == "subscribe"
		n.mu.Unlock()
		if live {
			s.confirmed()
		}
		return
	case "unsubscribe", "sunsubscribe":
		s.sent = false
		switch {
		case !live:
			// Unsubscribed, as the link asked or not: settled by the link.
			l.poke()
		case n.c.cluster:
			// The server dropped a live subscription: a master does for
			// the channels of a slot it no longer serves.
			n.detach(s)
			n.reroute(true)
		default:
			l.poke()
		}
	}
	n.mu.Unlock()
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

// message hands a message to the channel's subscription. It runs in a
// connection's reader: it must not block.
func (n *notifier) message(m rueidis.PubSubMessage) {
	n.mu.Lock()
	s := n.subs[m.Channel]
	n.mu.Unlock()
	if s != nil {
		s.message(m)
	}
}

// message must not block.
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
// waiter expiry, and the Client looks then. It must not block.
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

// close drops every subscription: the links close their connections, which
// ends the subscriptions on the server, and their goroutines end.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	for ch, s := range n.subs {
		if s.linger != nil {
			s.linger.Stop()
		}
		delete(n.subs, ch)
		n.closing[ch] = s
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

func isUnknownCommand(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.Contains(strings.ToLower(re.Error()), "unknown command")
}
