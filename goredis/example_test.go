package goredis_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/goredis"
)

// A service that talks to Redis through go-redis adds locks with the
// options it already has: the same server, credentials, database and TLS.
func ExampleDial() {
	opt := &redis.Options{Addr: redisAddr} // the service's configuration
	rdb := redis.NewClient(opt)
	defer rdb.Close()

	c, err := goredis.Dial(opt)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx := context.Background()
	l, err := c.Mutex("example:orders:42").Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer l.Unlock(context.WithoutCancel(ctx))
	rdb.Set(l.Context(), "example:orders:42:status", "paid", 0) // go-redis as before, under the lock
	fmt.Println("holding", l.Name())
	// Output: holding example:orders:42
}

// Cluster and Sentinel configurations are carried over the same way; a
// redis.UniversalOptions is read as redis.NewUniversalClient reads it.
// (Not run: it needs these servers.)
func ExampleDial_sentinel() {
	c, err := goredis.Dial(&redis.FailoverOptions{
		MasterName:    "mymaster",
		SentinelAddrs: []string{"sentinel-1:26379", "sentinel-2:26379", "sentinel-3:26379"},
		Password:      "primary's password",
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()
}

// ClientOption gives the rueidis options instead, for a rueidis client of
// one's own that redisync.New shares.
func ExampleClientOption() {
	o, err := goredis.ClientOption(&redis.Options{Addr: redisAddr})
	if err != nil {
		panic(err)
	}
	rc, err := rueidis.NewClient(o)
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	c, err := redisync.New(rc)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	l, err := c.Mutex("example:nightly").TryLock(context.Background())
	fmt.Println(err, l.Token() > 0)
	l.Unlock(context.Background())
	// Output: <nil> true
}
