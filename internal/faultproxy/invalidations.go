package faultproxy

// DropInvalidations drops the next n invalidation messages of client-side
// caching (RESP3 push frames of kind "invalidate") the server sends on any
// connection, as a network that loses them would: the client never learns
// that the keys it tracks changed. It adds to the drops still to come; Heal
// forgets them. Pub/sub messages are not counted (see DropPushes).
func (p *Proxy) DropInvalidations(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropInvalidations += max(n, 0)
}

// dropInvalidation reports whether the invalidation message at hand is to
// be dropped, counting it off.
func (p *Proxy) dropInvalidation() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dropInvalidations == 0 {
		return false
	}
	p.dropInvalidations--
	return true
}
