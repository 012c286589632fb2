package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

func TestSentinel(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := NewSentinel(t, 1, 3)
	t.Logf("primary + 1 replica + 3 sentinels ready in %v", time.Since(start).Round(time.Millisecond))

	require.Equal(t, "redisync", s.MasterName)
	require.Len(t, s.Replicas, 1)
	require.Len(t, s.Sentinels, 3)
	require.Equal(t, []string{s.Sentinels[0].Addr, s.Sentinels[1].Addr, s.Sentinels[2].Addr}, s.SentinelAddrs())
	requireRole(t, s.Primary, "master")
	requireRole(t, s.Replicas[0], "slave")
	for _, sen := range s.Sentinels {
		requireDo(t, sen, "127.0.0.1\n"+strconv.Itoa(s.Primary.Port), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
		master, err := sen.Do("SENTINEL", "MASTER", s.MasterName)
		require.NoError(t, err)
		require.Contains(t, master, "\nquorum\n2\n")
		require.Contains(t, master, "\ndown-after-milliseconds\n1000\n")
		require.Contains(t, master, "\nfailover-timeout\n5000\n")
	}

	client := newSentinelClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, client.Do(ctx, client.B().Set().Key("k").Value("before").Build()).Error())
	v, err := client.Do(ctx, client.B().Get().Key("k").Build()).ToString()
	require.NoError(t, err)
	require.Equal(t, "before", v)
	requireDo(t, s.Primary, "before", "GET", "k")

	old, replica := s.Primary, s.Replicas[0]
	start = time.Now()
	require.NoError(t, s.Failover())
	t.Logf("failover done in %v", time.Since(start).Round(time.Millisecond))
	require.Same(t, replica, s.Primary)
	require.Equal(t, []*Server{old}, s.Replicas)
	requireRole(t, s.Primary, "master")
	requireRole(t, old, "slave")
	requireDo(t, s.Primary, "before", "GET", "k")
	for _, sen := range s.Sentinels {
		requireDo(t, sen, "127.0.0.1\n"+strconv.Itoa(s.Primary.Port), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
	}

	// The client follows the switch and writes to the new primary.
	start = time.Now()
	value := requireWritesTo(t, client, s.Primary, 10*time.Second)
	t.Logf("client wrote to the new primary %v after the failover", time.Since(start).Round(time.Millisecond))
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err = client.Do(ctx, client.B().Get().Key("k").Build()).ToString()
	require.NoError(t, err)
	require.Equal(t, value, v)

	// A second failover switches back.
	start = time.Now()
	require.NoError(t, s.Failover())
	t.Logf("second failover done in %v", time.Since(start).Round(time.Millisecond))
	require.Same(t, old, s.Primary)
	require.Equal(t, []*Server{replica}, s.Replicas)
	requireWritesTo(t, client, s.Primary, 10*time.Second)
}

func TestSentinelWaitPrimary(t *testing.T) {
	t.Parallel()
	s := NewSentinel(t, 1, 3)
	old, replica := s.Primary, s.Replicas[0]
	requireDo(t, old, "OK", "SET", "k", "v")
	requireDo(t, old, "1", "WAIT", "1", "5000") // the replica has the key

	require.NoError(t, old.Kill())
	start := time.Now()
	require.NoError(t, s.WaitPrimary(30*time.Second))
	t.Logf("replica promoted %v after the primary was killed", time.Since(start).Round(time.Millisecond))
	require.Same(t, replica, s.Primary)
	require.Equal(t, []*Server{old}, s.Replicas, "the killed primary stays listed")
	requireRole(t, s.Primary, "master")
	requireDo(t, s.Primary, "v", "GET", "k")

	client := newSentinelClient(t, s)
	requireWritesTo(t, client, s.Primary, 10*time.Second)

	// Started again, the former primary is turned into a replica.
	require.NoError(t, old.Start())
	start = time.Now()
	require.NoError(t, waitFor(40*time.Second, "former primary not reconfigured", func() error {
		return linked(s.Primary, []*Server{old})
	}))
	t.Logf("restarted former primary replicates the new one after %v", time.Since(start).Round(time.Millisecond))
}

func TestSentinelPausedPrimary(t *testing.T) {
	t.Parallel()
	s := NewSentinel(t, 2, 1)
	old := s.Primary
	require.NoError(t, old.Pause())
	start := time.Now()
	require.NoError(t, s.WaitPrimary(30*time.Second))
	t.Logf("replica promoted %v after the primary was paused", time.Since(start).Round(time.Millisecond))
	require.NotSame(t, old, s.Primary)
	require.Len(t, s.Replicas, 2)
	require.Contains(t, s.Replicas, old)
	requireRole(t, s.Primary, "master")
	for _, r := range s.Replicas {
		if r != old {
			requireRole(t, r, "slave")
		}
	}
	require.NoError(t, old.Resume())
}

func TestSentinelStop(t *testing.T) {
	t.Parallel()
	s, err := StartSentinel(0, 1)
	require.NoError(t, err)
	require.Empty(t, s.Replicas)
	require.ErrorContains(t, s.Failover(), "at least one replica")

	all := append([]*Server{s.Primary}, s.Sentinels...)
	require.NoError(t, s.Stop())
	require.NoError(t, s.Stop(), "Stop is idempotent")
	for _, srv := range all {
		_, err := srv.Do("PING")
		require.Error(t, err)
		require.NoDirExists(t, srv.dir)
	}
}

func TestSentinelErrors(t *testing.T) {
	_, err := StartSentinel(-1, 1)
	require.Error(t, err)
	_, err = StartSentinel(1, 0)
	require.Error(t, err)

	t.Setenv("PATH", t.TempDir())
	_, err = StartSentinel(1, 1)
	require.ErrorIs(t, err, ErrNoRedisServer)
}

func newSentinelClient(t *testing.T, s *Sentinel) rueidis.Client {
	t.Helper()
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  s.SentinelAddrs(),
		Sentinel:     rueidis.SentinelOption{MasterSet: s.MasterName},
		DisableCache: true,
	})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return client
}

// requireWritesTo retries SET through client until a value lands on primary,
// and returns that value.
func requireWritesTo(t *testing.T, client rueidis.Client, primary *Server, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for i := 0; ; i++ {
		value := fmt.Sprintf("after-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := client.Do(ctx, client.B().Set().Key("k").Value(value).Build()).Error()
		cancel()
		if err == nil {
			if got, _ := primary.Do("GET", "k"); got == value {
				return value
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("client did not write to the primary %s within %v (last SET error: %v)", primary.Addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func requireRole(t *testing.T, s *Server, want string) {
	t.Helper()
	role, err := s.Do("ROLE")
	require.NoError(t, err)
	first, _, _ := strings.Cut(role, "\n")
	require.Equal(t, want, first, "ROLE of %s", s.Addr)
}
