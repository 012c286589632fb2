package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync"
)

// redisyncLocker is one redisync Client on its own connection.
type redisyncLocker struct {
	rc   rueidis.Client // nil when the Client dialed it
	c    *redisync.Client
	fair bool
	opts []redisync.LockOption // of every Mutex
}

// connectRedisync makes a Client whose locks are FairMutexes when fair is
// set, and Mutexes with lockOpts otherwise.
func connectRedisync(cfg clientConfig, fair bool, lockOpts ...redisync.LockOption) (locker, error) {
	opts := []redisync.Option{
		redisync.WithPrefix(cfg.prefix),
		redisync.WithWatchdogLease(cfg.lease),
		redisync.WithFenceRetention(10 * time.Minute),
		// Lost leases are what scenario F provokes: log errors only.
		redisync.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	}
	if n := cfg.passed; n != nil {
		opts = append(opts, redisync.WithMetrics(redisync.Metrics{
			PassedOn: func(string, string, time.Duration) { n.Add(1) },
		}))
	}
	opt := rueidis.ClientOption{InitAddress: []string{cfg.addr}}
	if cfg.rt == nil {
		// As users get it: Dial, which learns of changes to held keys.
		c, err := redisync.Dial(opt, opts...)
		if err != nil {
			return nil, err
		}
		return &redisyncLocker{c: c, fair: fair, opts: lockOpts}, nil
	}
	// Round trips are counted on a rueidis client of our own: New, with
	// DetectChanges so that it learns of changes to held keys as Dial's
	// Client does (without it, a Client passes nothing on locally by
	// default). Its tracking reads are not counted.
	detect := redisync.DetectChanges(&opt)
	rc, err := newRueidis(opt, cfg.rt)
	if err != nil {
		return nil, err
	}
	c, err := redisync.New(rc, append(opts, detect)...)
	if err != nil {
		rc.Close()
		return nil, err
	}
	return &redisyncLocker{rc: rc, c: c, fair: fair, opts: lockOpts}, nil
}

func (l *redisyncLocker) Lock(ctx context.Context, name string) (*held, error) {
	var lease *redisync.Lease
	var err error
	if l.fair {
		lease, err = l.c.FairMutex(name).Lock(ctx)
	} else {
		lease, err = l.c.Mutex(name, l.opts...).Lock(ctx)
	}
	if err != nil {
		return nil, err
	}
	return &held{unlock: lease.Unlock, lost: lease.Lost()}, nil
}

func (l *redisyncLocker) Close() {
	l.c.Close()
	if l.rc != nil {
		l.rc.Close()
	}
}

func redisyncMutex() *library {
	return &library{
		id:    "redisync",
		label: "redisync Mutex",
		note: "redisync Mutex: one rueidis client per locker, options WithPrefix and WithWatchdogLease " +
			"(the scenario's lease; renewed every third of it); waiters queue in Redis and a release hands the lock " +
			"to the first of them, telling it by sharded pub/sub. Local passes at their default: goroutines of one " +
			"Client that wait for a lock one of them holds get it from each other without a command to Redis, " +
			fmt.Sprintf("up to %d passes within %v of the acquisition in Redis.", redisync.DefaultLocalPasses, redisync.DefaultLocalPassWindow),
		renewal:      func(lease time.Duration) time.Duration { return lease / 3 },
		lossSignal:   true,
		countsPasses: true,
		connect:      func(cfg clientConfig) (locker, error) { return connectRedisync(cfg, false) },
		// The key layout of the README ("redisync:{N}" with the default prefix).
		key:      func(prefix, name string) string { return prefix + ":{" + name + "}" },
		attempts: scriptsBut,
	}
}

// redisyncGlobal is the Mutex without local passes: every hand-off, between
// goroutines of one Client too, goes through Redis.
func redisyncGlobal() *library {
	return &library{
		id:    globalRow,
		label: "redisync Mutex, no local passes",
		note: "redisync Mutex, no local passes: as redisync Mutex with WithLocalPasses(0, 0) on every Mutex: " +
			"every hand-off goes through Redis, between goroutines of one Client too (a goroutine waits in the " +
			"lock's queue in Redis like a waiter of another Client).",
		renewal:      func(lease time.Duration) time.Duration { return lease / 3 },
		lossSignal:   true,
		countsPasses: true,
		connect: func(cfg clientConfig) (locker, error) {
			return connectRedisync(cfg, false, redisync.WithLocalPasses(0, 0))
		},
		key:      func(prefix, name string) string { return prefix + ":{" + name + "}" },
		attempts: scriptsBut,
	}
}

func redisyncFair() *library {
	return &library{
		id:           "redisync-fair",
		label:        "redisync FairMutex",
		note:         "redisync FairMutex: as Mutex; besides, a free lock is never taken past the waiters.",
		renewal:      func(lease time.Duration) time.Duration { return lease / 3 },
		lossSignal:   true,
		countsPasses: true,
		connect:      func(cfg clientConfig) (locker, error) { return connectRedisync(cfg, true) },
		key:          func(prefix, name string) string { return prefix + ":fair:{" + name + "}" },
		attempts:     scriptsBut,
	}
}

// withBudget gives the redisync Mutex row of libs the budget of local
// passes spec ("N/D": WithLocalPasses(N, D)).
func withBudget(libs []*library, spec string) error {
	ns, ds, ok := strings.Cut(spec, "/")
	n, err := strconv.Atoi(ns)
	if !ok || err != nil {
		return fmt.Errorf("%q: want N/D, such as 64/2ms", spec)
	}
	d, err := time.ParseDuration(ds)
	if err != nil {
		return fmt.Errorf("%q: %w", spec, err)
	}
	for _, l := range libs {
		if l.id != "redisync" {
			continue
		}
		opt := redisync.WithLocalPasses(n, d)
		l.connect = func(cfg clientConfig) (locker, error) { return connectRedisync(cfg, false, opt) }
		l.note += fmt.Sprintf(" This run: WithLocalPasses(%d, %v).", n, d)
	}
	return nil
}
