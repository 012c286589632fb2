package redisync

import (
	"context"
	"time"
)

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

// The tests of every primitive cover the locks of other layouts (package
// redisson's) through layouts_test.go, in package redisync_test, which can
// import them.

// AddBlockingCalls sets what adds the calls of the locks of other layouts
// to the deadline tests (see blockingCalls).
func AddBlockingCalls(f func(
	forms func(kind string, setup func(context.Context, *Client, string) error,
		lock, try func(context.Context, *Client, string) (*Lease, error),
		acquire func(context.Context, *Client, string) <-chan *Lease),
	add func(name string, setup, call func(context.Context, *Client, string) error))) {
	moreBlockingCalls = f
}

// HangCase is one case of TestAcquireEndsAtOnceWhileRedisHangs.
type HangCase = hangCase

// NewHangCase makes a HangCase.
func NewHangCase(name string, hold func() (*Lease, error), acquire func(context.Context) <-chan *Lease) HangCase {
	return hangCase{name, hold, acquire}
}

// AddHangCases sets what adds the cases of the locks of other layouts to
// TestAcquireEndsAtOnceWhileRedisHangs.
func AddHangCases(f func(ctx context.Context, holder, waiter *Client, prefix string) []HangCase) {
	moreHangCases = f
}
