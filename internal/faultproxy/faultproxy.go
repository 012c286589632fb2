// Package faultproxy is a small TCP proxy for tests that injects network
// faults between clients and a server: cut connections, silent (blackholed)
// connections, refused connections, added latency, connections held up for
// a while (paused), and pub/sub messages dropped or delayed.
//
// A Proxy listens on a free 127.0.0.1 port and forwards every accepted
// connection to its target. Faults set with Cut, Blackhole, Refuse and
// SetLatency apply to all connections, current and future, until Heal; CutConn
// and BlackholeConn target one connection by its accept index. All methods are
// safe for concurrent use.
package faultproxy

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"time"
)

const (
	bufSize     = 32 << 10        // bytes read per chunk
	dialTimeout = 5 * time.Second // for the connection to the target
	acceptPause = 10 * time.Millisecond
	pauseCheck  = 20 * time.Millisecond // how often a paused connection looks whether its pause ended
)

// Proxy listens on 127.0.0.1 (a free port) and forwards each accepted
// connection to its target over a new TCP connection, one goroutine per
// direction. When either side of a forwarded connection closes or fails, both
// sides are closed.
//
// Create a Proxy with New and release it with Close.
type Proxy struct {
	ln     net.Listener
	ctx    context.Context // canceled by Close; aborts dials to the target
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every connection's goroutines

	mu        sync.Mutex
	target    string // the address new connections are forwarded to
	closed    bool
	blackhole bool          // new connections start blackholed
	refuse    bool          // new connections are closed at once
	latency   time.Duration // added before forwarding each chunk
	paused    time.Time     // every connection forwards nothing until then
	next      int           // accept index of the next connection
	conns     map[int]*conn // open connections by accept index

	dropPushes  int           // pub/sub messages still to drop
	delayPushes time.Duration // added to every pub/sub message
	pushes      PushStats

	dropInvalidations int // client-side caching invalidations still to drop
}

// conn is one client connection and its connection to the target.
type conn struct {
	client net.Conn
	done   chan struct{} // closed when the connection is closed

	// Guarded by Proxy.mu.
	server     net.Conn // nil until the target has been dialed
	blackholed bool     // once set, stays set until the connection is closed
	closed     bool
	paused     time.Time // nothing is forwarded on it until then
	subscriber bool      // the server confirmed a subscription on it

	wmu  sync.Mutex   // one write to the client at a time: frames stay whole
	lane []delayedMsg // pub/sub messages held back, in order; guarded by Proxy.mu
}

// delayedMsg is a pub/sub message frame held back until due.
type delayedMsg struct {
	frame []byte
	due   time.Time
}

// New starts a proxy for target (a "host:port" such as "127.0.0.1:6379"): it
// listens on a free 127.0.0.1 port and accepts connections in the background
// until Close. The target is dialed once per accepted connection; if that
// fails, the client connection is closed.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{target: target, ln: ln, ctx: ctx, cancel: cancel, conns: map[int]*conn{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the "127.0.0.1:PORT" address that clients should connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, closes every connection (both sides) and waits until
// all of the proxy's goroutines have returned. It is idempotent; it returns
// the error of closing the listener on the first call and nil afterwards.
func (p *Proxy) Close() error {
	p.mu.Lock()
	first := !p.closed
	p.closed = true
	var err error
	if first {
		err = p.ln.Close()
		p.cancel()
		p.closeAllLocked(func(*conn) bool { return true })
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// SetTarget makes the proxy forward the connections it accepts from now on
// to target (a "host:port"), as to a server that took over from the old
// one; the current connections stay with the old target until they close
// (Cut closes them).
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// Cut closes every current connection now, on both sides. Connections
// accepted afterwards are forwarded as usual (unless another fault is set).
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeAllLocked(func(*conn) bool { return true })
}

// Blackhole makes every current and future connection silent: connections
// are accepted and kept open, but nothing is forwarded in either direction,
// as on a dead network. Each direction holds at most one chunk it has read
// and then stops reading, so clients see neither replies nor errors; the
// server closing its side is not passed on either (a client closing its side
// still closes the connection). A blackholed connection stays blackholed
// until it is closed; Heal closes it.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackhole = true
	for _, c := range p.conns {
		c.blackholed = true
	}
}

// Refuse closes every current connection and makes the proxy close new
// connections right after accepting them, until Heal. Clients see their
// connection succeed and then reach end of file.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = true
	p.closeAllLocked(func(*conn) bool { return true })
}

// SetLatency delays every chunk forwarded in either direction, on current and
// future connections, by d before it is written; 0 (or a negative d) removes
// the delay. Each direction forwards its chunks in order, so a round trip
// takes at least 2*d longer.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = max(d, 0)
}

// Heal removes every fault: it ends Blackhole, Refuse and pauses, sets the
// latency to 0, forgets the pub/sub faults still to come (messages already
// held back are still delivered when due) and closes every blackholed connection (including those blackholed with
// BlackholeConn), dropping the data they held, so that clients reconnect to a
// clean stream. Other connections keep forwarding.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackhole, p.refuse, p.latency = false, false, 0
	p.paused, p.dropPushes, p.delayPushes = time.Time{}, 0, 0
	p.dropInvalidations = 0
	for _, c := range p.conns {
		c.paused = time.Time{}
	}
	p.closeAllLocked(func(c *conn) bool { return c.blackholed })
}

// Conns returns the number of currently open client connections. A
// connection counts from its accept until it is closed; connections closed by
// Refuse right after accept never count.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Open returns the accept indexes of the open client connections, in
// accept order.
func (p *Proxy) Open() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]int, 0, len(p.conns))
	for id := range p.conns {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// CutConn closes, on both sides, the i-th accepted connection (0-based, in
// accept order; connections closed by Refuse are numbered too) and reports
// whether it was still open.
func (p *Proxy) CutConn(i int) bool {
	return p.onConn(i, func(c *conn) { p.closeLocked(i, c) })
}

// BlackholeConn makes the i-th accepted connection (numbered as for CutConn)
// silent, as Blackhole does for all connections, and reports whether it was
// still open. Other connections are not affected. Heal closes it.
func (p *Proxy) BlackholeConn(i int) bool {
	return p.onConn(i, func(c *conn) { c.blackholed = true })
}

// onConn runs f, under p.mu, on the i-th accepted connection if it is
// still open, and reports whether it is.
func (p *Proxy) onConn(i int, f func(*conn)) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.conns[i]
	if ok {
		f(c)
	}
	return ok
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(acceptPause) // for example too many open files
			continue
		}
		p.mu.Lock()
		if p.closed || p.refuse {
			p.next++
			p.mu.Unlock()
			_ = nc.Close()
			continue // the listener is closed too when p.closed
		}
		c := &conn{client: nc, done: make(chan struct{}), blackholed: p.blackhole}
		id := p.next
		p.next++
		p.conns[id] = c
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(id, c)
	}
}

// serve dials the target and forwards both directions until c is closed.
func (p *Proxy) serve(id int, c *conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: dialTimeout}
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	server, err := d.DialContext(p.ctx, "tcp", target)
	if err != nil {
		p.closeConn(id, c)
		return
	}
	p.mu.Lock()
	if c.closed {
		p.mu.Unlock()
		_ = server.Close()
		return
	}
	c.server = server
	p.wg.Add(1)
	p.mu.Unlock()

	go func() {
		defer p.wg.Done()
		p.pump(id, c, server, c.client)
	}()
	p.pumpFrames(id, c, c.client, server)
}

// pump copies the client's stream, src, to the server, dst, chunk by chunk,
// applying the current faults to each chunk, and closes c when src or dst
// fails. The server's stream is copied by pumpFrames.
func (p *Proxy) pump(id int, c *conn, dst, src net.Conn) {
	defer p.closeConn(id, c)
	buf := make([]byte, bufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.forward(c, dst, buf[:n]) {
			return
		}
		if err != nil {
			return
		}
	}
}

// forward writes chunk to dst after the current latency, or holds it while c
// is blackholed. It returns false when c is closed or the write fails.
func (p *Proxy) forward(c *conn, dst net.Conn, chunk []byte) bool {
	p.mu.Lock()
	latency := p.latency
	p.mu.Unlock()
	if latency > 0 && !sleep(c, latency) {
		return false
	}
	for {
		p.mu.Lock()
		until := c.paused
		if p.paused.After(until) {
			until = p.paused
		}
		p.mu.Unlock()
		d := time.Until(until)
		if d <= 0 {
			break
		}
		if !sleep(c, min(d, pauseCheck)) { // Heal may end the pause early
			return false
		}
	}
	if p.isBlackholed(c) {
		<-c.done // blackholing ends only with the connection
		return false
	}
	if dst == c.client {
		c.wmu.Lock()
		defer c.wmu.Unlock()
	}
	_, err := dst.Write(chunk)
	return err == nil
}

// sleep waits d, or until c is closed; it reports whether c is still open.
func sleep(c *conn, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.done:
		return false
	}
}

func (p *Proxy) isBlackholed(c *conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return c.blackholed
}

func (p *Proxy) closeConn(id int, c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeLocked(id, c)
}

// closeAllLocked closes every open connection for which match is true. p.mu
// is held.
func (p *Proxy) closeAllLocked(match func(*conn) bool) {
	for id, c := range p.conns {
		if match(c) {
			p.closeLocked(id, c)
		}
	}
}

// closeLocked closes both sides of c and wakes its goroutines. It is
// idempotent. p.mu is held.
func (p *Proxy) closeLocked(id int, c *conn) {
	if c.closed {
		return
	}
	c.closed = true
	delete(p.conns, id)
	close(c.done)
	_ = c.client.Close()
	if c.server != nil {
		_ = c.server.Close()
	}
}
