package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// When a cluster topology refresh drops a connection, rueidis closes it
	// from a goroutine that sleeps 5s first; it may outlive Client.Close.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}

func TestStandalone(t *testing.T) {
	t.Parallel()
	s := Standalone(t)
	require.Equal(t, "127.0.0.1:"+strconv.Itoa(s.Port), s.Addr)

	requireDo(t, s, "PONG", "PING")
	requireDo(t, s, "OK", "SET", "k", "v")
	requireDo(t, s, "v", "GET", "k")
	requireDo(t, s, "", "GET", "missing")
	requireDo(t, s, "1", "INCR", "n")
	requireDo(t, s, "v\n\n1", "MGET", "k", "missing", "n")
	requireDo(t, s, "", "KEYS", "nothing-*")

	info, err := s.Do("CONFIG", "GET", "save")
	require.NoError(t, err)
	require.Equal(t, "save\n", info, "persistence must be off")
	requireDo(t, s, "OK", "DEBUG", "SET-ACTIVE-EXPIRE", "1")
}

func TestDoErrorReply(t *testing.T) {
	t.Parallel()
	s := Standalone(t)

	_, err := s.Do("NOSUCHCOMMAND")
	require.ErrorContains(t, err, "ERR unknown command")

	requireDo(t, s, "OK", "SET", "k", "v")
	_, err = s.Do("INCR", "k")
	require.EqualError(t, err, "ERR value is not an integer or out of range")

	_, err = s.Do()
	require.Error(t, err)
}

func TestKillStart(t *testing.T) {
	t.Parallel()
	s := Standalone(t)
	addr := s.Addr
	requireDo(t, s, "OK", "SET", "k", "v")

	require.NoError(t, s.Kill())
	require.NoError(t, s.Kill(), "Kill is idempotent")
	_, err := s.Do("PING")
	require.Error(t, err, "a killed server must not answer")
	require.Error(t, s.Pause())

	require.NoError(t, s.Start())
	require.Equal(t, addr, s.Addr)
	requireDo(t, s, "PONG", "PING")
	requireDo(t, s, "", "GET", "k") // no persistence: data is gone
	require.Error(t, s.Start(), "Start on a running server")

	requireDo(t, s, "OK", "SET", "k", "v")
	require.NoError(t, s.Restart())
	requireDo(t, s, "", "GET", "k")
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := Standalone(t)
	conn, err := net.Dial("tcp", s.Addr)
	require.NoError(t, err)
	defer conn.Close()
	r := bufio.NewReader(conn)

	require.NoError(t, s.Pause())
	_, err = conn.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	_, err = r.ReadString('\n')
	var netErr net.Error
	require.ErrorAs(t, err, &netErr)
	require.True(t, netErr.Timeout(), "a paused server must not answer: %v", err)

	require.NoError(t, s.Resume())
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "+PONG\r\n", line, "the pending command is answered after Resume")
}

func TestStop(t *testing.T) {
	t.Parallel()
	s, err := StartServer()
	require.NoError(t, err)
	require.DirExists(t, s.dir)

	require.NoError(t, s.Pause())
	start := time.Now()
	require.NoError(t, s.Stop(), "Stop works on a paused server")
	require.Less(t, time.Since(start), stopTimeout, "SIGTERM is handled, no SIGKILL needed")
	require.NoError(t, s.Stop(), "Stop is idempotent")
	require.NoDirExists(t, s.dir)
	_, err = s.Do("PING")
	require.Error(t, err)
	require.Error(t, s.Start(), "Start after Stop")
	require.NoError(t, s.Kill())

	s, err = StartServer()
	require.NoError(t, err)
	require.NoError(t, s.Kill())
	require.NoError(t, s.Stop(), "Stop after Kill")
	require.NoDirExists(t, s.dir)
}

func TestSeveralServers(t *testing.T) {
	t.Parallel()
	servers := make([]*Server, 4)
	var wg sync.WaitGroup
	for i := range servers {
		wg.Go(func() { servers[i] = Standalone(t) })
	}
	wg.Wait()
	ports := map[int]bool{}
	for i, s := range servers {
		require.False(t, ports[s.Port], "port %d used twice", s.Port)
		ports[s.Port] = true
		requireDo(t, s, "OK", "SET", "k", strconv.Itoa(i))
	}
	for i, s := range servers {
		requireDo(t, s, strconv.Itoa(i), "GET", "k")
	}
}

func TestStartError(t *testing.T) {
	t.Parallel()
	_, err := StartServer("--no-such-directive", "x")
	require.ErrorContains(t, err, "no-such-directive", "the error quotes the server log")

	// A port that is taken on every try (here by forcing the port of another
	// server) fails after the retries.
	s := Standalone(t)
	other, err := StartServer("--port", strconv.Itoa(s.Port))
	require.ErrorIs(t, err, errAddrInUse)
	require.ErrorContains(t, err, "Address already in use", "the error quotes the server log")
	require.Nil(t, other)
}

func TestNoRedisServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := StartServer()
	require.ErrorIs(t, err, ErrNoRedisServer)
	require.EqualError(t, err, "redis-server not found in PATH: run `make test` (it installs redis-server and redis-tools with apt-get) or `apt-get install redis-server redis-tools`")
	_, err = StartCluster(3, 0)
	require.ErrorIs(t, err, ErrNoRedisServer)

	// With redis-server but no redis-cli, the error says what to install.
	dir := t.TempDir()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		bin = "/usr/bin/redis-server"
	}
	require.NoError(t, os.Symlink(bin, dir+"/redis-server"))
	t.Setenv("PATH", dir)
	_, err = StartCluster(3, 0)
	require.ErrorContains(t, err, "redis-cli not found in PATH")
	require.ErrorContains(t, err, "redis-tools")
}

func TestCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := NewCluster(t, 3, 1)
	t.Logf("3 masters + 3 replicas ready in %v", time.Since(start).Round(10*time.Millisecond))

	require.Len(t, c.Masters, 3)
	require.Len(t, c.Replicas, 3)
	require.Equal(t, []string{c.Masters[0].Addr, c.Masters[1].Addr, c.Masters[2].Addr}, c.Addrs())
	for _, s := range append(c.Masters, c.Replicas...) {
		info, err := s.Do("CLUSTER", "INFO")
		require.NoError(t, err)
		require.Contains(t, info, "cluster_state:ok")
		require.Contains(t, info, "cluster_slots_assigned:16384")
		require.Contains(t, info, "cluster_known_nodes:6")
		require.Less(t, s.Port+busOffset, 65536)
	}

	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: c.Addrs()})
	require.NoError(t, err)
	defer client.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const keys = 200
	for i := range keys {
		k := fmt.Sprintf("key:%d", i)
		require.NoError(t, client.Do(ctx, client.B().Set().Key(k).Value(k).Build()).Error())
	}
	for i := range keys {
		k := fmt.Sprintf("key:%d", i)
		v, err := client.Do(ctx, client.B().Get().Key(k).Build()).ToString()
		require.NoError(t, err)
		require.Equal(t, k, v)
	}
	total := 0
	for _, m := range c.Masters {
		size, err := m.Do("DBSIZE")
		require.NoError(t, err)
		n, err := strconv.Atoi(size)
		require.NoError(t, err)
		require.Positive(t, n, "every master holds some keys")
		total += n
	}
	require.Equal(t, keys, total)

	_, err = c.Masters[0].Do("GET", "key:0")
	if err != nil {
		require.True(t, strings.HasPrefix(err.Error(), "MOVED "), "a redirect is an error reply: %v", err)
	}
}

func requireDo(t *testing.T, s *Server, want string, args ...string) {
	t.Helper()
	got, err := s.Do(args...)
	require.NoError(t, err, "%v", args)
	require.Equal(t, want, got, "%v", args)
}
