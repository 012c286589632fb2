package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// floorPoll is how long a floor waiter sleeps between attempts; it gives
// up after floorTries attempts (about half an hour) if its context has not
// ended first.
const (
	floorPoll  = 2 * time.Millisecond
	floorTries = 1 << 20
)

// floorRelease deletes the key only if it still holds the caller's token.
var floorRelease = rueidis.NewLuaScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// floorLocker is the least a Redis lock can do: SET NX PX to acquire,
// compare-and-delete to release, a short sleep between attempts. It is a
// rueidis client that takes locks: Close is the client's.
type floorLocker struct {
	rueidis.Client
	pfx   string
	lease time.Duration
}

func (l *floorLocker) Lock(ctx context.Context, name string) (*held, error) {
	key := plainKey(l.pfx, name)
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	set := l.B().Set().Key(key).Value(token).Nx().PxMilliseconds(l.lease.Milliseconds()).Build().Pin()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for try := 1; ; try++ {
		err := l.Do(ctx, set).Error()
		if err == nil {
			break
		}
		if !rueidis.IsRedisNil(err) {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		if try == floorTries {
			return nil, fmt.Errorf("floor: %s still locked after %d attempts", name, try)
		}
		timer.Reset(floorPoll)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
	return releasedBy(func(ctx context.Context) (bool, error) {
		n, err := floorRelease.Exec(ctx, l.Client, []string{key}, []string{token}).AsInt64()
		return n != 0, err
	}), nil
}

func floorLib() *library {
	return &library{
		id:    "floor",
		label: "floor (SET NX + CAD)",
		note: "floor: written here on a rueidis client: SET key token NX PX lease, released by a " +
			"compare-and-delete script (EVALSHA); waiters retry every 2 ms. No renewal, no loss signal.",
		poll: floorPoll,
		connect: func(cfg clientConfig) (locker, error) {
			rc, err := newRueidis(rueidis.ClientOption{InitAddress: []string{cfg.addr}}, cfg.rt)
			if err != nil {
				return nil, err
			}
			return &floorLocker{Client: rc, pfx: cfg.prefix, lease: cfg.lease}, nil
		},
		key:      plainKey,
		attempts: sets,
	}
}
