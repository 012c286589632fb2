package redisync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// A link is one pub/sub connection, to a server or to a Cluster master,
// shared by the subscriptions routed to it (route.go). Its goroutine (run)
// dials it, sends in one pipeline what the connection should subscribe or
// unsubscribe (sync), and waits for a change or for the connection's end.
// What the connection holds is learnt only from the server's subscribe and
// unsubscribe events (subscription), in the order it sent them, so that a
// confirmation of an old connection or of a dropped subscription is never
// taken for a current one. A connection that breaks is dialled again and
// every channel subscribed again; the waiters then look again, as messages
// may have been lost meanwhile.

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
	k := &linkConn{
		l: l,
		// A connection that breaks is dialled again at once (after a short
		// jittered pause), however many breaks came before: messages are
		// lost while it is down.
		retry:    errorBackoff(),
		failures: retryLog{log: n.c.log, msg: "redisync: subscription broken"},
	}
	defer k.hangup()
	// Behind Sentinel, rueidis moves its connections to a new primary, but
	// not a connection of one's own: the link follows by itself.
	if n.c.rc.Mode() == rueidis.ClientModeSentinel {
		t := time.NewTicker(primaryCheck)
		defer t.Stop()
		k.follow = t.C
	}
	for !l.settle() {
		if !k.step() {
			return
		}
	}
}

// linkConn is the connection that a link's goroutine keeps up, and how it
// has fared.
type linkConn struct {
	l        *link
	dc       rueidis.DedicatedClient // nil while down
	broken   <-chan error            // reports dc's end
	follow   <-chan time.Time        // behind Sentinel: time to look at the primary
	primary  string                  // behind Sentinel: where dc was dialled
	retry    backoff
	failures retryLog
}

// step dials the connection if it is down and has it subscribe and
// unsubscribe what the link's subscriptions ask, then waits for a change.
// It reports false when the goroutine is to end.
func (k *linkConn) step() bool {
	l := k.l
	if k.dc == nil {
		if err := k.dial(); err != nil {
			return k.failed(err)
		}
	}
	again, refused, err := l.sync(k.dc)
	switch {
	case err != nil:
		return k.failed(err)
	case again:
		return true
	case refused != nil:
		k.failures.failed("addr", l.addr, "err", refused)
		return pause(l.n.ctx, l.kick, l.settle, k.retry.next())
	}
	k.retry.reset()
	k.failures.succeeded("addr", l.addr)
	return k.wait()
}

// dial opens the connection.
func (k *linkConn) dial() error {
	l, n := k.l, k.l.n
	if k.follow != nil {
		k.primary = n.primary()
	}
	var err error
	if k.dc, k.broken, err = l.dial(); err != nil && n.c.cluster {
		// The master may be gone: read the slot map again.
		n.mu.Lock()
		n.reroute(true)
		n.mu.Unlock()
	}
	return err
}

// wait waits, the connection being in step with the link, until the
// subscriptions change, the connection breaks or, behind Sentinel, the
// primary changes. It reports false when the goroutine is to end.
func (k *linkConn) wait() bool {
	l, n := k.l, k.l.n
	select {
	case <-l.kick:
	case err := <-k.broken:
		if err == nil {
			err = errConnClosed
		}
		return k.failed(err)
	case <-k.follow:
		if p := n.primary(); p != k.primary {
			n.c.log.Info("redisync: subscriptions move to the new primary", "primary", p)
			k.hangup()
		}
	case <-n.ctx.Done():
		return false
	}
	return true
}

// failed closes the broken connection, logs err and pauses before the next
// dial. It reports false when the goroutine is to end.
func (k *linkConn) failed(err error) bool {
	l := k.l
	k.hangup()
	k.failures.failed("addr", l.addr, "err", err)
	return pause(l.n.ctx, l.kick, l.settle, k.retry.next())
}

// hangup closes the connection, if any.
func (k *linkConn) hangup() {
	k.l.hangup(k.dc)
	k.dc = nil
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
		if !n.live(s) && !s.sent {
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
	subs, unsubs := l.pending()
	if len(subs)+len(unsubs) == 0 {
		return false, nil, nil
	}
	cmds := make(rueidis.Commands, 0, len(subs)+len(unsubs))
	for _, s := range subs {
		if s.kind == classicPubSub || (s.kind == ownPubSub && classic) {
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
		case s.kind == ownPubSub && !classic && isUnknownCommand(rerr):
			n.classic.Store(true)
			again = true
		default:
			if addr, moved := re.IsMoved(); moved && n.c.cluster && addr != l.addr {
				l.movedTo(s, addr)
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

// pending returns the link's live subscriptions that the connection does
// not hold, marked as being sent, and the dropped ones that it holds.
func (l *link) pending() (subs, unsubs []*subscription) {
	n := l.n
	n.mu.Lock()
	defer n.mu.Unlock()
	for s := range l.subs {
		switch live := n.live(s); {
		case live && !s.sent:
			s.sending = true
			subs = append(subs, s)
		case !live && s.sent:
			unsubs = append(unsubs, s)
		}
	}
	return subs, unsubs
}

// movedTo learns from a MOVED reply to subscribing s that addr serves its
// slot, and routes s there if it is still live on the link. The caller
// holds n.mu.
func (l *link) movedTo(s *subscription, addr string) {
	n := l.n
	if n.moved == nil {
		n.moved = make(map[uint16]string)
	}
	n.moved[slotHash(s.channel)] = addr
	if s.link == l && n.live(s) {
		n.detach(s)
		n.attach(s, addr)
	}
}

// subscription handles a subscribe or unsubscribe event of the link's
// connection number conn: what the connection holds is known from these
// events, in the order the server sent them. It runs in the connection's
// reader: it must not block.
func (l *link) subscription(conn int64, ps rueidis.PubSubSubscription) {
	n := l.n
	n.mu.Lock()
	s, live := l.find(ps)
	if s == nil || l.conn != conn {
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

// find returns the link's subscription that a subscribe or unsubscribe
// event is about, and whether it is live: a Redisson subscription of the
// event's kind of pub/sub, or else the library's own subscription of the
// channel. The caller holds n.mu.
func (l *link) find(ps rueidis.PubSubSubscription) (s *subscription, live bool) {
	n := l.n
	kind := shardedPubSub
	if ps.Kind == "subscribe" || ps.Kind == "unsubscribe" {
		kind = classicPubSub
	}
	for _, k := range []subKey{{ps.Channel, kind}, {ps.Channel, ownPubSub}} {
		if s := n.subs[k]; s != nil && s.link == l {
			return s, true
		}
		if s := n.closing[k]; s != nil && s.link == l {
			return s, false
		}
	}
	return nil, false
}

func isUnknownCommand(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.Contains(strings.ToLower(re.Error()), "unknown command")
}
