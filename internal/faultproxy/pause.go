package faultproxy

import "time"

// Pause holds up every current connection, and those accepted meanwhile,
// for d: nothing is forwarded in either direction and nothing is closed, as
// when a process or a network stalls. Data read meanwhile is held and
// forwarded, in order, once d has passed. A later Pause may lengthen the
// pause, never shorten it; Heal ends it.
func (p *Proxy) Pause(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if until := time.Now().Add(d); until.After(p.paused) {
		p.paused = until
	}
}

// PauseConn holds up the i-th accepted connection (numbered as for CutConn)
// for d, as Pause does for all of them, and reports whether it was still
// open.
func (p *Proxy) PauseConn(i int, d time.Duration) bool {
	until := time.Now().Add(d)
	return p.onConn(i, func(c *conn) {
		if until.After(c.paused) {
			c.paused = until
		}
	})
}
