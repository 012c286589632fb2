package redisync

import "time"

// RedisAddrForExamples gives the examples, in package redisync_test, the
// address of the test Redis server.
var RedisAddrForExamples = redisAddr

// ClientForExamples gives the examples a Client connected to that server,
// shared by them and closed after the last one.
var ClientForExamples = clientForExamples

// pausePresence stalls c's presence loop for d, as a process lapse would:
// it holds the loop's mutex, so no pass, check, join or leave of a waiter
// of c runs until d has passed.
func (c *Client) pausePresence(d time.Duration) {
	c.presence.mu.Lock()
	defer c.presence.mu.Unlock()
	time.Sleep(d)
}
