package main

import (
	"context"
	"math"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// redsyncLocker is one redsync instance on one go-redis pool (a single
// Redis node: quorum 1).
type redsyncLocker struct {
	rdb   *redis.Client
	rs    *redsync.Redsync
	pfx   string
	lease time.Duration
}

func (l *redsyncLocker) Lock(ctx context.Context, name string) (*held, error) {
	// A redsync Mutex is not safe for concurrent use: one per acquisition.
	m := l.rs.NewMutex(plainKey(l.pfx, name),
		redsync.WithExpiry(l.lease),
		// Wait until ctx ends, not 32 tries (about 5 s).
		redsync.WithTries(math.MaxInt32))
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err() // redsync reports ErrFailed
		}
		return nil, err
	}
	return releasedBy(m.UnlockContext), nil
}

func (l *redsyncLocker) Close() { l.rdb.Close() }

func redsyncLib() *library {
	return &library{
		id:    "redsync",
		label: "redsync",
		note: "redsync: one go-redis v9 pool (PoolSize 64) through its goredis/v9 adapter, quorum of 1; " +
			"WithExpiry(lease), default retry delay U(50, 250) ms, WithTries(MaxInt32) so Lock waits until its " +
			"context ends (the default 32 tries give up after about 5 s). No renewal, no loss signal.",
		poll: 250 * time.Millisecond,
		connect: func(cfg clientConfig) (locker, error) {
			rdb := newGoRedis(cfg)
			return &redsyncLocker{rdb: rdb, rs: redsync.New(goredis.NewPool(rdb)), pfx: cfg.prefix, lease: cfg.lease}, nil
		},
		key:      plainKey,
		attempts: sets,
	}
}
