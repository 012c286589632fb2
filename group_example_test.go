package redisync_test

import (
	"errors"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync"
)

// A group holds several locks as one: here the two accounts of a transfer.
// The names share a hash tag, so even on a Cluster they live in one slot and
// the group is taken by one script, in one round trip. A name held through
// the group is held for a Mutex of that name.
func ExampleNewGroup() {
	c := client()
	from, to := c.Mutex("example:{bank}:account:1"), c.Mutex("example:{bank}:account:2")
	l, err := redisync.NewGroup(to, from).Lock(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(l.Name())
	_, err = c.Mutex("example:{bank}:account:2").TryLock(ctx)
	fmt.Println("account 2 locked:", errors.Is(err, redisync.ErrLocked))
	fmt.Println(l.Unlock(ctx))
	// Output:
	// ["example:{bank}:account:1" "example:{bank}:account:2"]
	// account 2 locked: true
	// <nil>
}

// Locks of different Clients (here two prefixes stand in for two
// deployments) are taken one at a time in a canonical order, so groups over
// overlapping names never deadlock. Code that holds the group takes one of
// its locks again through the lease's Context instead of waiting for
// itself, and the group's fencing token is newer than any earlier token of
// its names.
func ExampleGroup_Lock() {
	orders, _ := redisync.Dial(rueidis.ClientOption{InitAddress: []string{redisAddr()}}, redisync.WithPrefix("example-orders"))
	defer orders.Close()
	stock, _ := redisync.Dial(rueidis.ClientOption{InitAddress: []string{redisAddr()}}, redisync.WithPrefix("example-stock"))
	defer stock.Close()

	before, _ := stock.Mutex("sku:9").Lock(ctx)
	before.Unlock(ctx)

	g := redisync.NewGroup(orders.Mutex("order:42"), stock.Mutex("sku:9"))
	l, err := g.Lock(ctx)
	if err != nil {
		panic(err)
	}
	inner, err := stock.Mutex("sku:9").Lock(l.Context()) // re-enters
	fmt.Println(err == nil, l.Token() > before.Token())
	inner.Unlock(ctx)
	fmt.Println(l.Unlock(ctx))
	// Output:
	// true true
	// <nil>
}

// A Quorum holds a lock on a majority of independent servers and keeps
// working while a minority of them is down. Here three prefixes of one
// server stand in for three servers.
func ExampleNewQuorum() {
	var clients []*redisync.Client
	for _, p := range []string{"example-a", "example-b", "example-c"} {
		c, err := redisync.Dial(rueidis.ClientOption{InitAddress: []string{redisAddr()}}, redisync.WithPrefix(p))
		if err != nil {
			panic(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	q := redisync.NewQuorum("example:nightly-report", clients)

	l, err := q.Lock(ctx)
	if err != nil {
		panic(err)
	}
	// Another acquisition finds the lock held on every server.
	_, err = q.TryLock(ctx)
	fmt.Println(errors.Is(err, redisync.ErrNoQuorum), errors.Is(err, redisync.ErrLocked))
	fmt.Println("fencing token:", l.Token() > 0)
	fmt.Println(l.Unlock(ctx))
	// Output:
	// true true
	// fencing token: true
	// <nil>
}
