package redisync

import "time"

// RedisAddrForExamples gives the examples, in package redisync_test, the
// address of the test Redis server.
var RedisAddrForExamples = redisAddr

// ClientForExamples gives the examples a Client connected to that server,
// shared by them and closed after the last one.
var ClientForExamples = clientForExamples

// pausePresence stalls c's presence passes for d, as a lapse of the
// Client would: its deadlines in the queues it waits in are not renewed,
// and what it waits for is not read, until d has passed.
func (c *Client) pausePresence(d time.Duration) {
	c.presence.stall.Lock()
	defer c.presence.stall.Unlock()
	time.Sleep(d)
}

// stallWatchdog stops c's watchdog from looking at its leases, as a lapse
// of the Client would: no deadline is enforced and nothing is renewed until
// resume is called.
func (c *Client) stallWatchdog() (resume func()) {
	c.watchdog.mu.Lock()
	return c.watchdog.mu.Unlock
}
