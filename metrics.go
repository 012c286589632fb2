package redisync

import "time"

// Metrics receives a Client's measurements, for dashboards. Every field is
// optional. The functions are called synchronously on the library's own
// goroutines and must return quickly; they must not call back into the
// Client. Primitive names are "mutex", "fair", and so on, one per type.
// Module github.com/redisync/redisync/otel adapts Metrics to OpenTelemetry.
type Metrics struct {
	// Acquired is called when an acquisition succeeds in Redis, with how
	// long it took, waiting included. A Mutex passed on locally is counted
	// by PassedOn instead.
	Acquired func(primitive, name string, waited time.Duration)
	// PassedOn is called when a goroutine gets a Mutex passed on locally
	// by another goroutine of the Client (WithLocalPasses), with how long
	// it waited. Acquired and PassedOn together count every acquisition.
	PassedOn func(primitive, name string, waited time.Duration)
	// Released is called when Unlock releases a lease, with how long it
	// was held.
	Released func(primitive, name string, held time.Duration)
	// Lost is called when a lease that somebody received is lost, with the
	// reason (ErrExpired, ErrForceUnlocked, ErrTakenOver,
	// ErrConnectionLost, ErrClosed). A fixed lease that runs out is counted
	// by Expired instead.
	Lost func(primitive, name string, reason error)
	// Expired is called when a fixed lease (WithFixedLease) that somebody
	// received runs out before it was released: the lease reports
	// ErrExpired, but running out is often the intent of a fixed lease.
	Expired func(primitive, name string)
	// Renewed is called after each batch the watchdog sends, with the
	// number of leases in it and the error when it failed.
	Renewed func(leases int, err error)
	// Subscribed is called with +1 when a pub/sub subscription is made and
	// -1 when it is dropped.
	Subscribed func(delta int)
	// WaitFallback is called when a wait for a lock ended by its fallback
	// timer rather than by a message or the Client's presence pass: a
	// waiter that would otherwise have slept through its turn. Waiting
	// never relies on it (messages are for latency, the presence pass for
	// liveness), so any call is a bug worth reporting; each is also logged
	// at WARN. A message that comes within 100 ms of the timer is late,
	// not lost, and is not reported; a report comes those 100 ms after
	// the wait ended.
	WaitFallback func(primitive, name string)
	// PublishedOneWay is called each time an operation runs that may
	// publish a lock's messages by one kind of pub/sub alone (classic or
	// sharded) on servers that have both: a lock of another layout whose
	// publishing mode was narrowed to one kind, with the lock's name.
	// Waiters that listen the other way (other clients of that layout)
	// miss its messages, and wake only when the holder's lease runs out.
	// Each name is also logged at WARN, once.
	PublishedOneWay func(name string)
}

// fellBack counts and logs a wait of a primitive's lock (name, key) that
// its fallback timer ended.
func (c *Client) fellBack(primitive, name, key string) {
	c.log.Warn("redisync: a wait was ended by its fallback timer, not by a message or a presence pass", "primitive", primitive, "key", key)
	if f := c.cfg.metrics.WaitFallback; f != nil {
		f(primitive, name)
	}
}

// WithMetrics sends the Client's measurements to m.
func WithMetrics(m Metrics) Option {
	return func(c *config) { c.metrics = m }
}
