package redisync

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// Routing: which link a subscription is sent on. Outside Cluster there is
// one link, for the server (or the Sentinel primary). On Cluster a channel
// is subscribed on the master of its slot, and each master has a link of
// its own. The slot map is read from whichever node answers first, MOVED
// replies to a subscription amend it slot by slot, and it is read again
// (reroute) when a master cannot be dialled or drops the channels of a slot
// it no longer serves. route then moves every subscription not subscribed
// yet to the link of its slot's master; a new one whose master is not
// known yet waits, on no link, until it is.

// slotRange is a range of Cluster slots and the address of their master.
type slotRange struct {
	first, last uint16
	addr        string
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
	retry := errorBackoff()
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
