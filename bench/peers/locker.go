package main

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// locker is one client of a lock library: what one process would make, with
// its own connection or connection pool.
type locker interface {
	// Lock acquires the lock name, waiting while ctx allows. ctx bounds the
	// wait only, never the hold.
	Lock(ctx context.Context, name string) (*held, error)
	// Close releases the client's connections and goroutines.
	Close()
}

// held is one acquired lock.
type held struct {
	unlock func(ctx context.Context) error
	// lost is closed when the library reports the lock lost; nil when the
	// library has no such signal.
	lost <-chan struct{}
}

// Unlock releases the lock.
func (h *held) Unlock(ctx context.Context) error { return h.unlock(ctx) }

var errNotHeld = errors.New("lock was not held at unlock")

// releasedBy is a held lock that release unlocks. release reports false
// when the lock was not held any more, which Unlock returns as errNotHeld.
func releasedBy(release func(ctx context.Context) (bool, error)) *held {
	return &held{unlock: func(ctx context.Context) error {
		ok, err := release(ctx)
		if err == nil && !ok {
			err = errNotHeld
		}
		return err
	}}
}

// clientConfig is what every adapter is given to make one client.
type clientConfig struct {
	addr   string
	prefix string        // every key the client writes starts with it
	lease  time.Duration // validity of a lock; the watchdog lease for libraries that renew
	// rt, when not nil, counts the client's calls into its Redis driver:
	// one per command or pipeline sent, that is one round trip each.
	rt *atomic.Int64
	// passed, when not nil, counts the locks passed on locally between
	// goroutines of the client, for libraries that count them
	// (library.countsPasses).
	passed *atomic.Int64
}

// library is one library under test (one row of the tables).
type library struct {
	id    string // as given to -libs
	label string // row label
	note  string // its configuration, printed under the tables
	// poll is the longest sleep between two attempts of a waiter; 0 when
	// waiters are woken by Redis.
	poll time.Duration
	// renewal is the library's renewal period for a lease; nil when it does
	// not renew held locks by itself.
	renewal func(lease time.Duration) time.Duration
	// lossSignal: the library tells a holder that its lock was lost.
	lossSignal bool
	// countsPasses: the library counts the locks it passes on between
	// goroutines of a client without Redis (clientConfig.passed).
	countsPasses bool
	connect      func(cfg clientConfig) (locker, error)
	// key is the Redis key that holds the lock name, for scenario F's
	// external DEL.
	key func(prefix, name string) string
	// attempts is the number of acquire attempts in a window of INFO
	// commandstats deltas in which releases locks were released.
	attempts func(d cmdDelta, releases int64) int64
}

// libraries lists every library, in table order.
func libraries() []*library {
	return []*library{redisyncMutex(), redisyncGlobal(), redisyncFair(), redsyncLib(), redislockLib(), rueidislockLib(), floorLib(), floorFencedLib()}
}

// countingClient is a rueidis.Client that counts the calls made through it.
// Everything else is the wrapped client's.
type countingClient struct {
	rueidis.Client
	n *atomic.Int64
}

func (c countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c countingClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.DoMulti(ctx, cmds...)
}

func (c countingClient) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.DoCache(ctx, cmd, ttl)
}

func (c countingClient) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.DoMultiCache(ctx, multi...)
}

func (c countingClient) Receive(ctx context.Context, sub rueidis.Completed, fn func(rueidis.PubSubMessage)) error {
	c.n.Add(1)
	return c.Client.Receive(ctx, sub, fn)
}

// newRueidis makes a rueidis client for addr, counting calls when rt is set.
func newRueidis(opt rueidis.ClientOption, rt *atomic.Int64) (rueidis.Client, error) {
	rc, err := rueidis.NewClient(opt)
	if err != nil || rt == nil {
		return rc, err
	}
	return countingClient{rc, rt}, nil
}

// countHook counts the commands and pipelines a go-redis client sends.
type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// goRedisPoolSize is the pool of every go-redis client: larger than the
// goroutines of any scenario but G, so that no goroutine waits for a
// connection where it could run.
const goRedisPoolSize = 64

// newGoRedis makes a go-redis v9 client for addr, counting commands when rt
// is set.
func newGoRedis(cfg clientConfig) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: cfg.addr, PoolSize: goRedisPoolSize})
	if cfg.rt != nil {
		rdb.AddHook(countHook{cfg.rt})
	}
	return rdb
}

// plainKey is the key of lock name for the libraries that are given the
// whole key: the prefix, a colon and the name.
func plainKey(prefix, name string) string { return prefix + ":" + name }

// sets is the attempts of libraries whose every attempt runs one SET NX
// (directly or in a script), and nothing else runs SET.
func sets(d cmdDelta, _ int64) int64 { return d.calls["set"] }

// scriptsBut is the attempts of libraries whose attempts and releases are
// scripts and nothing else is.
func scriptsBut(d cmdDelta, releases int64) int64 {
	return d.calls["evalsha"] + d.calls["eval"] - releases
}
