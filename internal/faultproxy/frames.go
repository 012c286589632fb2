package faultproxy

import (
	"bytes"
	"net"
	"strconv"
	"time"
)

// The server's side of every connection is read as a stream of RESP frames
// (RESP2 or RESP3), so that pub/sub messages, RESP3 push frames of kind
// "message", "smessage" or "pmessage", can be dropped or held back whole
// while the stream stays valid. A stream that is not RESP is forwarded as
// it comes from then on.

// PushStats counts the pub/sub messages the proxy saw, as delivered,
// dropped or delayed.
type PushStats struct {
	Forwarded, Dropped, Delayed int
}

// DropPushes drops the next n pub/sub messages the server sends on any
// connection (the other frames, subscription confirmations among them, go
// through). It adds to the drops still to come.
func (p *Proxy) DropPushes(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropPushes += max(n, 0)
}

// DelayPushes holds back every pub/sub message the server sends from now on
// by d before forwarding it, on every connection, until it is called again
// (0 ends it) or Heal. Replies overtake the messages held back; the
// messages of a connection keep their order.
func (p *Proxy) DelayPushes(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delayPushes = max(d, 0)
}

// Pushes returns the counts of pub/sub messages so far.
func (p *Proxy) Pushes() PushStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pushes
}

// CutSubscribers closes, on both sides, every open connection on which the
// server confirmed a subscription, and returns how many it closed.
func (p *Proxy) CutSubscribers() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	p.closeAllLocked(func(c *conn) bool {
		if c.subscriber {
			n++
		}
		return c.subscriber
	})
	return n
}

// pumpFrames copies the server's stream, src, to the client, dst, frame by
// frame, applying the pub/sub faults to the messages, and closes c when
// either side fails.
func (p *Proxy) pumpFrames(id int, c *conn, dst, src net.Conn) {
	defer p.closeConn(id, c)
	buf := make([]byte, bufSize)
	var pending []byte
	raw := false
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if raw {
				if !p.forward(c, dst, buf[:n]) {
					return
				}
			} else {
				pending = append(pending, buf[:n]...)
				rest, ok, open := p.frames(c, dst, pending)
				if !open {
					return
				}
				if !ok { // not RESP: forward the rest as it is
					raw = true
					if !p.forward(c, dst, rest) {
						return
					}
					rest = nil
				}
				pending = append([]byte(nil), rest...)
			}
		}
		if err != nil {
			if p.isBlackholed(c) {
				<-c.done // a dead network does not report the server's close
			}
			return
		}
	}
}

// frames forwards the complete frames at the start of b, with the pub/sub
// faults applied, and returns what is left of b: the start of a frame, or,
// when ok is false, from the first byte that is not RESP. open is false
// when c is closed.
func (p *Proxy) frames(c *conn, dst net.Conn, b []byte) (rest []byte, ok, open bool) {
	start := 0 // of the frames not yet forwarded
	i := 0
	for i < len(b) {
		end := valueEnd(b, i)
		if end == incomplete {
			break
		}
		if end == notRESP {
			if start < i && !p.forward(c, dst, b[start:i]) {
				return nil, false, false
			}
			return b[i:], false, true
		}
		frame := b[i:end]
		switch kind := pushKind(frame); kind {
		case "message", "smessage", "pmessage":
			if act := p.pushAction(c); act != pushForward {
				if start < i && !p.forward(c, dst, b[start:i]) {
					return nil, false, false
				}
				if act == pushDelay {
					p.hold(c, frame)
				}
				start = end
			}
		case "invalidate":
			if p.dropInvalidation() {
				if start < i && !p.forward(c, dst, b[start:i]) {
					return nil, false, false
				}
				start = end
			}
		case "subscribe", "ssubscribe", "psubscribe":
			p.mu.Lock()
			c.subscriber = true
			p.mu.Unlock()
		}
		i = end
	}
	if start < i && !p.forward(c, dst, b[start:i]) {
		return nil, false, false
	}
	return b[i:], true, true
}

type pushAct int

const (
	pushForward pushAct = iota
	pushDrop
	pushDelay // held back, or queued behind messages held back
)

// pushAction decides what becomes of one pub/sub message of c.
func (p *Proxy) pushAction(c *conn) pushAct {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.dropPushes > 0:
		p.dropPushes--
		p.pushes.Dropped++
		return pushDrop
	case p.delayPushes > 0:
		p.pushes.Delayed++
		return pushDelay
	case len(c.lane) > 0:
		p.pushes.Forwarded++
		return pushDelay // after those held back, in order
	}
	p.pushes.Forwarded++
	return pushForward
}

// hold queues a copy of the message frame on c's lane, due after the
// current delay, and starts the goroutine that delivers the lane.
func (p *Proxy) hold(c *conn, frame []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.closed {
		return
	}
	c.lane = append(c.lane, delayedMsg{frame: bytes.Clone(frame), due: time.Now().Add(p.delayPushes)})
	if len(c.lane) == 1 {
		p.wg.Add(1)
		go p.deliverLane(c)
	}
}

// deliverLane forwards c's held messages when due, in order, and returns
// once the lane is empty or c is closed.
func (p *Proxy) deliverLane(c *conn) {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		if len(c.lane) == 0 || c.closed {
			c.lane = nil
			p.mu.Unlock()
			return
		}
		m := c.lane[0]
		p.mu.Unlock()
		if d := time.Until(m.due); d > 0 && !sleep(c, d) {
			return
		}
		if !p.forward(c, c.client, m.frame) {
			return
		}
		p.mu.Lock()
		c.lane = c.lane[1:]
		p.mu.Unlock()
	}
}

const (
	incomplete = -1
	notRESP    = -2
)

// valueEnd returns the index in b just past the RESP value that starts at
// i, incomplete when b holds only its start, or notRESP.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return incomplete
	}
	nl := bytes.Index(b[i+1:], []byte("\r\n"))
	if nl < 0 {
		if len(b)-i > 1<<16 {
			return notRESP // no header line is that long
		}
		return incomplete
	}
	head, next := b[i+1:i+1+nl], i+1+nl+2
	switch b[i] {
	case '+', '-', ':', '_', '#', ',', '(':
		return next
	case '$', '!', '=':
		n, err := strconv.Atoi(string(head))
		switch {
		case err != nil:
			return notRESP
		case n < 0:
			return next // RESP2 null
		case next+n+2 > len(b):
			return incomplete
		}
		return next + n + 2
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(string(head))
		switch {
		case err != nil:
			return notRESP
		case n < 0:
			return next
		}
		if b[i] == '%' || b[i] == '|' {
			n *= 2
		}
		j := next
		for range n {
			if j = valueEnd(b, j); j < 0 {
				return j
			}
		}
		if b[i] == '|' { // attributes come before the value they describe
			return valueEnd(b, j)
		}
		return j
	}
	return notRESP
}

// pushKind returns the kind of a RESP3 push frame (its first element, such
// as "message"), or "" for other frames.
func pushKind(frame []byte) string {
	if len(frame) == 0 || frame[0] != '>' {
		return ""
	}
	nl := bytes.Index(frame, []byte("\r\n"))
	first := frame[nl+2:]
	if len(first) == 0 || first[0] != '$' {
		return ""
	}
	nl = bytes.Index(first, []byte("\r\n"))
	n, err := strconv.Atoi(string(first[1:nl]))
	if err != nil || n < 0 || nl+2+n > len(first) {
		return ""
	}
	return string(first[nl+2 : nl+2+n])
}
