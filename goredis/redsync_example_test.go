package goredis_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	redisyncgoredis "github.com/redisync/redisync/goredis"
)

// Code moving from redsync has two packages named goredis: redsync's pool
// (github.com/go-redsync/redsync/v4/redis/goredis/v9) and this one. While
// both are in use, import this one under another name:
//
//	import (
//		"github.com/go-redsync/redsync/v4"
//		"github.com/go-redsync/redsync/v4/redis/goredis/v9"
//		redisyncgoredis "github.com/redisync/redisync/goredis"
//	)
//
//	rs := redsync.New(goredis.NewPool(rdb))       // before
//	c, err := redisyncgoredis.Dial(rdb.Options()) // after: the same server, credentials and database
func ExampleDial_fromRedsync() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr}) // the service's client
	defer rdb.Close()

	c, err := redisyncgoredis.Dial(rdb.Options())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()
	l, err := c.Mutex("example:invoices").Lock(ctx) // rs.NewMutex("invoices").LockContext(ctx)
	if err != nil {
		panic(err)
	}
	defer l.Unlock(ctx)
	fmt.Println("holding", l.Name())
	// Output: holding example:invoices
}
