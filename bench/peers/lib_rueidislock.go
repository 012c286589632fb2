package main

import (
	"context"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// rueidislockLocker is one rueidislock Locker (one rueidis client with
// client-side caching); Close is the Locker's.
type rueidislockLocker struct {
	rueidislock.Locker
}

func (l *rueidislockLocker) Lock(ctx context.Context, name string) (*held, error) {
	// rueidislock ties the lock to the context it was acquired with: give it
	// one that only ctx's end before the acquisition cancels.
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	lockCtx, unlock, err := l.WithContext(lctx, name)
	if !stop() {
		// ctx ended while waiting: give up what may have been acquired.
		if err == nil {
			unlock()
		}
		cancel()
		return nil, ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &held{
		unlock: func(context.Context) error {
			unlock() // returns once the key is deleted
			cancel()
			return nil
		},
		lost: lockCtx.Done(),
	}, nil
}

func rueidislockLib() *library {
	return &library{
		id:    "rueidislock",
		label: "rueidislock",
		note: "rueidislock: KeyMajority 1 (one key per lock), NoLoopTracking, client-side caching on, " +
			"KeyValidity = lease, ExtendInterval default (half of it); waiters woken by invalidation pushes.",
		renewal:    func(lease time.Duration) time.Duration { return lease / 2 },
		lossSignal: true,
		connect: func(cfg clientConfig) (locker, error) {
			opt := rueidislock.LockerOption{
				ClientOption:   rueidis.ClientOption{InitAddress: []string{cfg.addr}},
				KeyPrefix:      cfg.prefix,
				KeyValidity:    cfg.lease,
				KeyMajority:    1,
				NoLoopTracking: true,
			}
			if cfg.rt != nil {
				opt.ClientBuilder = func(o rueidis.ClientOption) (rueidis.Client, error) { return newRueidis(o, cfg.rt) }
			}
			l, err := rueidislock.NewLocker(opt)
			if err != nil {
				return nil, err
			}
			return &rueidislockLocker{l}, nil
		},
		key:      func(prefix, name string) string { return prefix + ":0:" + name },
		attempts: sets,
	}
}
