package main

import (
	"context"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// redislockBackoff is bsm/redislock's retry strategy here: LinearBackoff, the
// strategy the reference measurements used, with the shorter of their two
// periods.
const redislockBackoff = 10 * time.Millisecond

// redislockLocker is one bsm/redislock client on one go-redis pool.
type redislockLocker struct {
	rdb   *redis.Client
	c     *redislock.Client
	pfx   string
	lease time.Duration
}

func (l *redislockLocker) Lock(ctx context.Context, name string) (*held, error) {
	// Every scenario's ctx has a deadline: without one, Obtain would stop
	// waiting after the TTL.
	lock, err := l.c.Obtain(ctx, plainKey(l.pfx, name), l.lease,
		&redislock.Options{RetryStrategy: redislock.LinearBackoff(redislockBackoff)})
	if err != nil {
		return nil, err
	}
	return &held{unlock: lock.Release}, nil
}

func (l *redislockLocker) Close() { l.rdb.Close() }

func redislockLib() *library {
	return &library{
		id:    "redislock",
		label: "bsm/redislock",
		note: "bsm/redislock: go-redis v9 (PoolSize 64); TTL = lease, RetryStrategy LinearBackoff(10 ms) " +
			"(a retry every 10 ms while waiting). No renewal, no loss signal.",
		poll: redislockBackoff,
		connect: func(cfg clientConfig) (locker, error) {
			rdb := newGoRedis(cfg)
			return &redislockLocker{rdb: rdb, c: redislock.New(rdb), pfx: cfg.prefix, lease: cfg.lease}, nil
		},
		key:      plainKey,
		attempts: sets,
	}
}
