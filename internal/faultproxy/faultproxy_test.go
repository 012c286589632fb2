package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redisync/redisync/internal/faultproxy"
	"github.com/redisync/redisync/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// setup starts a redis-server and a proxy in front of it, both released in
// t.Cleanup.
func setup(t *testing.T) (*redistest.Server, *faultproxy.Proxy) {
	t.Helper()
	srv := redistest.Standalone(t)
	p, err := faultproxy.New(srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return srv, p
}

// newClient connects a rueidis client through the proxy; it is closed in
// t.Cleanup (before the proxy).
func newClient(t *testing.T, p *faultproxy.Proxy) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr()}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// eventually runs f until it succeeds, for at most 5s.
func eventually(t *testing.T, f func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after 5s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rawConn is a plain TCP client speaking inline RESP commands.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, p *faultproxy.Proxy) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// ping sends PING and waits up to timeout for the reply line.
func (c *rawConn) ping(timeout time.Duration) (string, error) {
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

func requirePong(t *testing.T, c *rawConn) {
	t.Helper()
	reply, err := c.ping(2 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "+PONG", reply)
}

func requireSilent(t *testing.T, c *rawConn) {
	t.Helper()
	_, err := c.ping(200 * time.Millisecond)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "want a timeout, got %v", err)
}

func TestForward(t *testing.T) {
	srv, p := setup(t)
	require.True(t, strings.HasPrefix(p.Addr(), "127.0.0.1:"), p.Addr())
	c := newClient(t, p)
	ctx := context.Background()

	require.NoError(t, c.Do(ctx, c.B().Set().Key("k").Value("v").Build()).Error())
	got, err := c.Do(ctx, c.B().Get().Key("k").Build()).ToString()
	require.NoError(t, err)
	require.Equal(t, "v", got)

	direct, err := srv.Do("GET", "k")
	require.NoError(t, err)
	require.Equal(t, "v", direct)
	require.GreaterOrEqual(t, p.Conns(), 1)
}

func TestCut(t *testing.T) {
	srv, p := setup(t)
	c := newClient(t, p)

	blpop := make(chan error, 1)
	go func() {
		blpop <- c.Do(context.Background(), c.B().Blpop().Key("list").Timeout(0).Build()).Error()
	}()
	eventually(t, func(context.Context) error { // BLPOP has reached the server
		info, err := srv.Do("INFO", "clients")
		if err != nil {
			return err
		}
		if !strings.Contains(info, "blocked_clients:1") {
			return errors.New("BLPOP not blocked yet")
		}
		return nil
	})

	p.Cut()
	require.Zero(t, p.Conns())
	select {
	case err := <-blpop:
		require.Error(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("BLPOP still blocked after Cut")
	}

	eventually(t, func(ctx context.Context) error {
		return c.Do(ctx, c.B().Set().Key("after").Value("cut").Build()).Error()
	})
	got, err := srv.Do("GET", "after")
	require.NoError(t, err)
	require.Equal(t, "cut", got)
}

// After SetTarget and Cut, the client's new connections reach the new
// target; until Cut, a connection open before stays with the old one. (A
// raw connection shows it: a rueidis client may open another connection
// of its own at any time.)
func TestSetTarget(t *testing.T) {
	old, p := setup(t)
	c := newClient(t, p)
	ctx := context.Background()
	require.NoError(t, c.Do(ctx, c.B().Set().Key("k").Value("old").Build()).Error())
	srv := redistest.Standalone(t)
	raw, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer raw.Close()
	r := bufio.NewReader(raw)
	get := func() string {
		t.Helper()
		require.NoError(t, raw.SetDeadline(time.Now().Add(5*time.Second)))
		_, err := io.WriteString(raw, "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
		require.NoError(t, err)
		head, err := r.ReadString('\n')
		require.NoError(t, err)
		if head == "$-1\r\n" {
			return "(nil)"
		}
		body, err := r.ReadString('\n')
		require.NoError(t, err)
		return strings.TrimSuffix(body, "\r\n")
	}
	require.Equal(t, "old", get(), "the raw connection reaches the old target")

	p.SetTarget(srv.Addr)
	require.Equal(t, "old", get(), "a connection open before stays with the old target")
	var got string

	p.Cut()
	eventually(t, func(ctx context.Context) error {
		return c.Do(ctx, c.B().Set().Key("k").Value("new").Build()).Error()
	})
	got, err = srv.Do("GET", "k")
	require.NoError(t, err)
	require.Equal(t, "new", got)
	got, err = old.Do("GET", "k")
	require.NoError(t, err)
	require.Equal(t, "old", got)
}

func TestBlackhole(t *testing.T) {
	srv, p := setup(t)
	c := newClient(t, p)
	require.NoError(t, c.Do(context.Background(), c.B().Ping().Build()).Error())

	p.Blackhole()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err := c.Do(ctx, c.B().Set().Key("bh").Value("v").Build()).Error()
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)

	raw := dialRaw(t, p) // new connections are silent as well
	requireSilent(t, raw)
	require.GreaterOrEqual(t, p.Conns(), 2)

	n, err := srv.Do("EXISTS", "bh")
	require.NoError(t, err)
	require.Equal(t, "0", n)

	p.Heal()
	eventually(t, func(ctx context.Context) error {
		return c.Do(ctx, c.B().Set().Key("healed").Value("v").Build()).Error()
	})
	got, err := c.Do(context.Background(), c.B().Get().Key("healed").Build()).ToString()
	require.NoError(t, err)
	require.Equal(t, "v", got)

	n, err = srv.Do("EXISTS", "bh") // the held SET was dropped on Heal
	require.NoError(t, err)
	require.Equal(t, "0", n)

	_, err = raw.ping(2 * time.Second) // Heal closed the blackholed connection
	require.Error(t, err)
	require.False(t, isTimeout(err), "want the connection closed, got %v", err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestLatency(t *testing.T) {
	_, p := setup(t)
	c := newClient(t, p)
	ctx := context.Background()

	p.SetLatency(50 * time.Millisecond)
	start := time.Now()
	require.NoError(t, c.Do(ctx, c.B().Ping().Build()).Error())
	elapsed := time.Since(start)
	require.GreaterOrEqual(t, elapsed, 100*time.Millisecond)
	require.Less(t, elapsed, 2*time.Second)

	p.SetLatency(0)
	start = time.Now()
	require.NoError(t, c.Do(ctx, c.B().Ping().Build()).Error())
	require.Less(t, time.Since(start), 2*time.Second)
}

func TestRefuse(t *testing.T) {
	_, p := setup(t)
	raw := dialRaw(t, p)
	requirePong(t, raw)

	p.Refuse()
	require.Zero(t, p.Conns())
	_, err := raw.ping(2 * time.Second) // current connections are cut
	require.Error(t, err)
	require.False(t, isTimeout(err), "want the connection closed, got %v", err)

	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr()}, DisableCache: true})
	if err == nil {
		c.Close()
	}
	require.Error(t, err)
	require.Zero(t, p.Conns())

	p.Heal()
	c2 := newClient(t, p)
	require.NoError(t, c2.Do(context.Background(), c2.B().Ping().Build()).Error())
}

func TestPerConn(t *testing.T) {
	_, p := setup(t)
	a := dialRaw(t, p)
	requirePong(t, a) // accepted first: index 0
	b := dialRaw(t, p)
	requirePong(t, b) // index 1
	require.Equal(t, 2, p.Conns())

	require.True(t, p.CutConn(0))
	_, err := a.ping(2 * time.Second)
	require.Error(t, err)
	require.False(t, isTimeout(err), "want the connection closed, got %v", err)
	requirePong(t, b)
	require.Equal(t, 1, p.Conns())
	require.False(t, p.CutConn(0), "already closed")
	require.False(t, p.CutConn(7), "never accepted")
	require.False(t, p.BlackholeConn(0), "already closed")

	require.True(t, p.BlackholeConn(1))
	requireSilent(t, b)
	c := dialRaw(t, p) // index 2 is not affected
	requirePong(t, c)
	require.Equal(t, 2, p.Conns())

	p.Heal() // closes b only
	requirePong(t, c)
	require.Equal(t, 1, p.Conns())
	require.True(t, p.CutConn(2))
	require.Zero(t, p.Conns())
}

func TestClose(t *testing.T) {
	_, p := setup(t)
	a := dialRaw(t, p)
	requirePong(t, a)
	b := dialRaw(t, p)
	requirePong(t, b)
	p.BlackholeConn(1)
	requireSilent(t, b)
	p.SetLatency(time.Hour)
	_, err := io.WriteString(a, "PING\r\n") // held in the latency wait
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	require.NoError(t, p.Close(), "Close is idempotent")
	require.Zero(t, p.Conns())

	for _, c := range []*rawConn{a, b} {
		_, err = c.ping(2 * time.Second)
		require.Error(t, err)
		require.False(t, isTimeout(err), "want the connection closed, got %v", err)
	}
}
