package redisync

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync/internal/redistest"
)

// dialURL dials and locks one name; the Client is closed at the end of the
// test.
func dialURL(t *testing.T, url, name string) (*Client, *Lease) {
	t.Helper()
	ctx := context.Background()
	c, err := DialURL(url, WithLogger(quietLogger()))
	require.NoError(t, err, url)
	t.Cleanup(func() { c.Close() })
	l := mustLock(t, ctx, c.Mutex(name).Lock)
	t.Cleanup(func() { l.Unlock(ctx) })
	return c, l
}

func TestDialURLStandalone(t *testing.T) {
	s := redistest.Standalone(t)
	_, err := s.Do("ACL", "SETUSER", "alice", "on", ">secret", "~*", "&*", "+@all")
	require.NoError(t, err)
	dialURL(t, "redis://alice:secret@"+s.Addr+"/3?client_name=dialurl", "url")

	keyspace, err := s.Do("INFO", "keyspace")
	require.NoError(t, err)
	require.Contains(t, keyspace, "db3:keys=")
	require.NotContains(t, keyspace, "db0:")
	clients, err := s.Do("CLIENT", "LIST")
	require.NoError(t, err)
	require.Regexp(t, `name=dialurl .*db=3 .*user=alice`, clients)
}

func TestDialURLCluster(t *testing.T) {
	e := clusterEnv(t)
	c, _ := dialURL(t, "redis://"+e.addrs[0]+"?addr="+e.addrs[1], "url-cluster")
	require.True(t, c.cluster)
	c, _ = dialURL(t, "redis://"+e.addrs[2], "url-cluster-one-seed")
	require.True(t, c.cluster, "one node of a Cluster gives a Cluster client")
}

func TestDialURLSentinel(t *testing.T) {
	s := redistest.NewSentinel(t, 0, 2)
	addrs := s.SentinelAddrs()
	c, _ := dialURL(t, "redis://"+addrs[0]+"?addr="+addrs[1]+"&master_set="+s.MasterName, "url-sentinel")
	n, err := s.Primary.Do("EXISTS", c.keysFor("url-sentinel").lock)
	require.NoError(t, err)
	require.Equal(t, "1", n, "the lock is on the primary")
}

func TestDialURLRejectsBadURLs(t *testing.T) {
	for _, url := range []string{
		"",
		"127.0.0.1:6379",
		"http://127.0.0.1:6379",
		"redis://127.0.0.1:6379/zero",
		"redis://127.0.0.1:6379/1/2",
		"redis://127.0.0.1:6379?db=x",
		"redis://127.0.0.1:6379?dial_timeout=soon",
		"rediss://127.0.0.1:6379?skip_verify=maybe",
		"redis://alice:hunter2@127.0.0.1:6379/%zz",
	} {
		c, err := DialURL(url)
		require.ErrorIs(t, err, ErrInvalidArgument, "%q", url)
		require.Nil(t, c)
		require.False(t, strings.Contains(err.Error(), "hunter2"), "the password is in %q", err)
	}
}
