package redisync

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// TestClientName: a dialed Client names its connections after its id and
// WithClientName, on every node it talks to; its id stays a UUID.
func TestClientName(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		logs := &logBuffer{}
		c, err := Dial(rueidis.ClientOption{InitAddress: e.addrs, DisableCache: true},
			WithClientName("billing@host-7/pid-42"), WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
		require.NoError(t, err)
		defer c.Close()
		_, err = uuid.Parse(c.ID())
		require.NoError(t, err, "ID is not a UUID: %q", c.ID())
		l := mustLock(t, ctx, c.Mutex(t.Name()).Lock)
		defer l.Unlock(ctx)

		servers := []string{}
		if e.cluster != nil {
			for _, m := range e.cluster.Masters {
				servers = append(servers, m.Addr)
			}
		} else {
			servers = append(servers, e.server.Addr)
		}
		want := "name=redisync:" + c.ID() + ":billing@host-7/pid-42 "
		rc := e.rueidisClient(t)
		nodes := rc.Nodes()
		for _, addr := range servers {
			// The node that holds the lock knows the name, and so does
			// every node the Client is connected to.
			list, err := nodes[addr].Do(ctx, rc.B().ClientList().Build()).ToString()
			require.NoError(t, err)
			if strings.Contains(list, "name=redisync:"+c.ID()) {
				require.Contains(t, list, want, addr)
			}
		}
		holder := servers[0]
		if e.cluster != nil {
			m, _ := slotOwner(t, e.cluster, c.keysFor(t.Name()).lock)
			holder = m.Addr
		}
		list, err := nodes[holder].Do(ctx, rc.B().ClientList().Build()).ToString()
		require.NoError(t, err)
		require.Contains(t, list, want, "the node holding the lock")

		// The name labels the log lines too.
		c.Mutex(t.Name()).Locker().Unlock()
		require.Contains(t, logs.String(), "redisync.client_name=billing@host-7/pid-42")
	})
}

// TestClientNameWithNew: a Client on the caller's connections leaves their
// name alone and labels its log lines.
func TestClientNameWithNew(t *testing.T) {
	e := standaloneEnv(t)
	rc := e.rueidisClient(t)
	logs := &logBuffer{}
	c, err := New(rc, WithClientName("svc"), WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	require.NoError(t, err)
	defer c.Close()
	c.Mutex(t.Name()).Locker().Unlock()
	require.Contains(t, logs.String(), "redisync.client_name=svc")
	list, err := rc.Do(context.Background(), rc.B().ClientList().Build()).ToString()
	require.NoError(t, err)
	require.NotContains(t, list, "name=redisync:"+c.ID())
}
