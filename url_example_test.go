package redisync_test

import (
	"errors"
	"fmt"

	"github.com/redisync/redisync"
)

// DialURL takes the URL a service is configured with: rediss:// for TLS,
// ?addr= for more seed nodes of a Cluster, ?master_set= for the primary
// behind Sentinel.
func ExampleDialURL() {
	c, err := redisync.DialURL("redis://" + redisAddr() + "/0")
	if err != nil {
		panic(err)
	}
	defer c.Close()

	l, err := c.Mutex("example:url").Lock(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("holding", l.Name())
	l.Unlock(ctx)

	_, err = redisync.DialURL("http://127.0.0.1:6379")
	fmt.Println(errors.Is(err, redisync.ErrInvalidArgument))
	// Output:
	// holding example:url
	// true
}
