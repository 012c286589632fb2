package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
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

// floorFencedAcquire is SET NX PX, and when it took the lock, the next
// fencing token from a counter key of the lock's own (INCR), in one script.
var floorFencedAcquire = rueidis.NewLuaScript(`if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return redis.call("INCR", KEYS[2]) end return false`)

// floorLocker is the least a Redis lock can do: SET NX PX to acquire,
// compare-and-delete to release, a short sleep between attempts. It is a
// rueidis client that takes locks: Close is the client's. A fenced one
// (floorFencedLib) takes its lock in a script that also counts its
// fencing token, the least a lock whose holders get rising tokens can do.
type floorLocker struct {
	rueidis.Client
	pfx    string
	lease  time.Duration
	fenced bool
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
	keys, args := []string{key, key + ":fence"}, []string{token, strconv.FormatInt(l.lease.Milliseconds(), 10)}
	for try := 1; ; try++ {
		var err error
		if l.fenced {
			err = floorFencedAcquire.Exec(ctx, l.Client, keys, args).Error()
		} else {
			err = l.Do(ctx, set).Error()
		}
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

// floorFencedLib is the floor with fencing tokens: its acquisition is a
// script (SET NX PX, then INCR of the lock's counter key), its release the
// floor's. It shows what rising tokens alone cost against the floor.
func floorFencedLib() *library {
	l := floorLib()
	l.id, l.label = "floor-fenced", "floor, fenced (script: SET NX + INCR)"
	l.note = "floor, fenced: the floor, but each attempt is a script that runs SET key token NX PX lease " +
		"and, when it took the lock, INCR of a counter key: the least a lock with fencing tokens does."
	connect := l.connect
	l.connect = func(cfg clientConfig) (locker, error) {
		lk, err := connect(cfg)
		if err != nil {
			return nil, err
		}
		lk.(*floorLocker).fenced = true
		return lk, nil
	}
	return l
}
