package main

import (
	"context"
	"strings"
)

// nameHolders fills in the names of the Clients that hold what snap shows.
// A Client made with redisync.WithClientName names its connections (Dial)
// or one connection of its own (New) "redisync:ID:NAME", so CLIENT LIST on
// the nodes finds it; the nodes are
// asked only for ids not seen before. It is best effort: a node that
// refuses CLIENT LIST (an ACL without it) leaves the names out.
func (c *client) nameHolders(ctx context.Context, snap *snapshot) {
	var refs []*clientRef
	wanted := map[string]bool{}
	for _, k := range snap.Kinds {
		for _, r := range k.clients() {
			refs = append(refs, r)
			if _, known := c.names[r.ClientID]; !known {
				wanted[r.ClientID] = true
			}
		}
	}
	if len(wanted) > 0 {
		c.listClients(ctx, wanted)
	}
	for _, r := range refs {
		r.ClientName = c.names[r.ClientID]
	}
}

// listClients reads the names of the wanted client ids from CLIENT LIST on
// every node. Once every node answered, an id without a name is
// remembered as such: a Client names its connections when it dials.
func (c *client) listClients(ctx context.Context, wanted map[string]bool) {
	complete := true
	for _, node := range c.rc.Nodes() {
		list, err := node.Do(ctx, node.B().ClientList().Build()).ToString()
		if err != nil {
			complete = false
			continue
		}
		for _, line := range strings.Split(list, "\n") {
			for _, f := range strings.Fields(line) {
				v, ok := strings.CutPrefix(f, "name=redisync:")
				if !ok {
					continue
				}
				if id, name, ok := strings.Cut(v, ":"); ok && wanted[id] {
					c.names[id] = name
				}
			}
		}
	}
	if complete {
		for id := range wanted {
			if _, ok := c.names[id]; !ok {
				c.names[id] = ""
			}
		}
	}
}
