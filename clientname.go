package redisync

import (
	"context"
	"slices"
	"time"

	"github.com/redis/rueidis"
)

// A Client made by New uses the caller's connections, whose names are the
// caller's (rueidis.ClientOption.ClientName, set before the Client and its
// ID exist), so CLIENT LIST, where `redisync inspect` and `redisync watch`
// look, would not name it. Given WithClientName, it keeps a connection of
// its own, named as a dialed Client's connections are, while it is open:
// one idle connection, on one master of a Cluster (the CLI reads CLIENT
// LIST on every node; other tools may read the masters alone), dialed
// again a second after it breaks.

// nameRedial is the pause before a broken name connection is dialed again.
const nameRedial = time.Second

// keepName keeps the Client's name connection until Close; Close waits for
// nameDone.
func (c *Client) keepName() {
	c.nameDone = make(chan struct{})
	go func() {
		defer close(c.nameDone)
		for {
			if dc, broken := c.nameConnection(); dc != nil {
				select {
				case <-c.closed:
					dc.Close()
					return
				case <-broken:
					dc.Close()
				}
			}
			t := time.NewTimer(nameRedial)
			select {
			case <-c.closed:
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
}

// nameConnection dials the name connection and names it; the channel it
// returns reports the connection's end. It returns nil when it could not.
func (c *Client) nameConnection() (rueidis.DedicatedClient, <-chan error) {
	rc := c.rc
	if c.cluster {
		nodes := rc.Nodes()
		addrs := make([]string, 0, len(nodes))
		for a := range nodes {
			addrs = append(addrs, a)
		}
		if len(addrs) == 0 {
			return nil, nil
		}
		slices.Sort(addrs)
		rc = nodes[addrs[0]]
		// A master when one answers: a replica may be any node's a
		// failover later, and tools that read CLIENT LIST often read the
		// masters alone.
		for _, a := range addrs {
			ctx, stop := context.WithTimeout(context.Background(), time.Second)
			role, err := nodes[a].Do(ctx, nodes[a].B().Role().Build()).ToArray()
			stop()
			if err != nil || len(role) == 0 {
				continue
			}
			if r, _ := role[0].ToString(); r == "master" {
				rc = nodes[a]
				break
			}
		}
	}
	dc, _ := rc.Dedicate()
	ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	if err := dc.Do(ctx, dc.B().ClientSetname().ConnectionName(connectionName(c.id, c.cfg.clientName)).Build()).Error(); err != nil {
		c.log.Warn("redisync: could not name a connection after the Client; the CLI will not show its name", "err", err)
		dc.Close()
		return nil, nil
	}
	// Hooks keep the connection to the Client, and report its end.
	return dc, dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(rueidis.PubSubMessage) {}})
}
