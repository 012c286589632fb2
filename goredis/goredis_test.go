package goredis_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/auth"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/goredis"
	"github.com/redisync/redisync/internal/redistest"
)

// redisAddr is the address of the Redis server the examples use.
var redisAddr string

// quiet drops go-redis' log lines.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	s, err := redistest.StartServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redisAddr = s.Addr
	code := m.Run()
	s.Stop()
	if code == 0 {
		// A closed rueidis Cluster client closes the connections a topology
		// refresh dropped, and refreshes once more, a few seconds later.
		if err := goleak.Find(
			goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
			goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const (
	user     = "alice"
	password = "secret"
)

// addUser adds the ACL user the tests authenticate as to every server, and
// turns the default user off where off is set: only alice can connect then.
func addUser(t *testing.T, off bool, servers ...*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		_, err := s.Do("ACL", "SETUSER", user, "on", ">"+password, "~*", "&*", "+@all")
		require.NoError(t, err)
		if off {
			_, err = s.Do("ACL", "SETUSER", "default", "off")
			require.NoError(t, err)
		}
	}
}

// lock dials a Client from opt and locks name with it; both are released
// at the end of the test.
func lock[C goredis.Config](t *testing.T, opt C, name string) *redisync.Client {
	t.Helper()
	ctx := context.Background()
	c, err := goredis.Dial(opt, redisync.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.Equal(t, redisync.DetectOnChange, c.LossDetection(), "a lost lock is reported within a round trip")
	l, err := c.Mutex(name).Lock(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { l.Unlock(ctx) })
	return c
}

// requireLocked checks with go-redis that name's lock is held.
func requireLocked(t *testing.T, rdb redis.UniversalClient, name string) {
	t.Helper()
	n, err := rdb.Exists(context.Background(), "redisync:{"+name+"}").Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "lock %q not held", name)
}

func TestStandalone(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	s := redistest.Standalone(t, "--unixsocket", sock)
	addUser(t, true, s)
	check := redis.NewClient(&redis.Options{Addr: s.Addr, Username: user, Password: password, DB: 3})
	defer check.Close()

	opt := &redis.Options{Addr: s.Addr, Username: user, Password: password, DB: 3, ClientName: "svc"}
	rdb := redis.NewClient(opt) // the service's client
	defer rdb.Close()
	require.NoError(t, rdb.Ping(context.Background()).Err())
	for name, opt := range map[string]*redis.Options{
		"options":              opt,
		"options of a client":  rdb.Options(), // with go-redis' own Dialer
		"credentials provider": {Addr: s.Addr, DB: 3, CredentialsProvider: func() (string, string) { return user, password }},
		"credentials provider with context": {Addr: s.Addr, DB: 3, CredentialsProviderContext: func(context.Context) (string, string, error) {
			return user, password, nil
		}},
		"unix socket": {Addr: sock, Username: user, Password: password, DB: 3},
	} {
		t.Run(name, func(t *testing.T) {
			lock(t, opt, t.Name())
			requireLocked(t, check, t.Name())
		})
	}
	clients, err := check.ClientList(context.Background()).Result()
	require.NoError(t, err)
	require.Regexp(t, `name=svc .*db=3 .*user=alice`, clients)

	opt = &redis.Options{Addr: s.Addr, Username: user, Password: "wrong"}
	_, err = goredis.Dial(opt)
	require.Error(t, err, "wrong credentials reach the server")
}

// TestRESP2 dials a real server with Protocol 2: the Client works without
// client-side caching, and finds a lost lock at its next renewal.
func TestRESP2(t *testing.T) {
	ctx := context.Background()
	opts := []redisync.Option{redisync.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), redisync.WithWatchdogLease(600 * time.Millisecond)}
	for name, dial := range map[string]func() (*redisync.Client, error){
		"options": func() (*redisync.Client, error) {
			return goredis.Dial(&redis.Options{Addr: redisAddr, Protocol: 2}, opts...)
		},
		"universal options": func() (*redisync.Client, error) {
			return goredis.Dial(&redis.UniversalOptions{Addrs: []string{redisAddr}, Protocol: 2}, opts...)
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := dial()
			require.NoError(t, err)
			defer c.Close()
			require.Equal(t, redisync.DetectOnRenewal, c.LossDetection())
			m := c.Mutex(t.Name())
			l, err := m.Lock(ctx)
			require.NoError(t, err)
			_, err = m.ForceUnlock(ctx)
			require.NoError(t, err)
			select {
			case <-l.Lost():
			case <-time.After(5 * time.Second):
				t.Fatal("a force-unlocked lease was not reported lost")
			}
			require.ErrorIs(t, l.Err(), redisync.ErrForceUnlocked)
		})
	}
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	roots := selfSigned(t, dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	redistest.Standalone(t, "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(dir, "cert.pem"), "--tls-key-file", filepath.Join(dir, "key.pem"),
		"--tls-ca-cert-file", filepath.Join(dir, "cert.pem"), "--tls-auth-clients", "no")

	opt := &redis.Options{
		Addr:      net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots},
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	require.NoError(t, rdb.Ping(context.Background()).Err())
	lock(t, opt, "tls")
	lock(t, rdb.Options(), "tls-dialer")
	requireLocked(t, rdb, "tls")
	requireLocked(t, rdb, "tls-dialer")

	opt = &redis.Options{Addr: opt.Addr, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	_, err = goredis.Dial(opt)
	require.Error(t, err, "a certificate from an unknown authority is accepted")
}

// selfSigned writes a certificate for 127.0.0.1 and its key to dir, as
// cert.pem and key.pem, and returns a pool that trusts it.
func selfSigned(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cert.pem"), certPEM, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(certPEM))
	return pool
}

func TestCluster(t *testing.T) {
	cl := redistest.NewCluster(t, 3, 0)
	addUser(t, true, cl.Masters...)
	opt := &redis.ClusterOptions{Addrs: cl.Addrs(), Username: user, Password: password}
	rdb := redis.NewClusterClient(opt)
	defer rdb.Close()

	c := lock(t, opt, "cluster")
	for i := range 10 { // names in every master's slots
		name := "cluster-" + strconv.Itoa(i)
		l, err := c.Mutex(name).Lock(context.Background())
		require.NoError(t, err)
		requireLocked(t, rdb, name)
		require.NoError(t, l.Unlock(context.Background()))
	}
	lock(t, &redis.UniversalOptions{Addrs: cl.Addrs(), Username: user, Password: password}, "cluster-universal")
	requireLocked(t, rdb, "cluster")
	requireLocked(t, rdb, "cluster-universal")
}

func TestFailover(t *testing.T) {
	s := redistest.NewSentinel(t, 0, 2)
	addUser(t, false, s.Primary)
	addUser(t, true, s.Sentinels...)
	opt := &redis.FailoverOptions{
		MasterName:       s.MasterName,
		SentinelAddrs:    s.SentinelAddrs(),
		SentinelUsername: user,
		SentinelPassword: password,
		Username:         user,
		Password:         password,
		DB:               2,
		ClientName:       "svc",
	}
	rdb := redis.NewFailoverClient(opt)
	defer rdb.Close()

	lock(t, opt, "sentinel")
	lock(t, &redis.UniversalOptions{
		MasterName: s.MasterName, Addrs: s.SentinelAddrs(), SentinelUsername: user, SentinelPassword: password,
		Username: user, Password: password, DB: 2,
	}, "sentinel-universal")
	requireLocked(t, rdb, "sentinel")
	requireLocked(t, rdb, "sentinel-universal")
	clients, err := s.Primary.Do("CLIENT", "LIST")
	require.NoError(t, err)
	require.Regexp(t, `name=svc .*db=2 .*user=alice`, clients)

	opt.SentinelPassword = "wrong"
	_, err = goredis.Dial(opt)
	require.Error(t, err, "wrong Sentinel credentials reach the Sentinels")
}

func TestClientOption(t *testing.T) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: "redis.internal"}
	o, err := goredis.ClientOption(&redis.Options{
		Addr: "redis.internal:6380", ClientName: "svc", DialTimeout: 2 * time.Second,
		ReadTimeout: 3 * time.Second, WriteTimeout: time.Second, Protocol: 2, TLSConfig: cfg,
	})
	require.NoError(t, err)
	require.Equal(t, []string{"redis.internal:6380"}, o.InitAddress)
	require.Equal(t, "svc", o.ClientName)
	require.Equal(t, 2*time.Second, o.Dialer.Timeout)
	require.Equal(t, 3*time.Second, o.ConnWriteTimeout)
	require.True(t, o.AlwaysRESP2)
	require.False(t, o.DisableCache)
	require.Equal(t, "redis.internal", o.TLSConfig.ServerName)
	require.NotSame(t, cfg, o.TLSConfig, "the caller's tls.Config is not shared")

	o, err = goredis.ClientOption(&redis.Options{})
	require.NoError(t, err)
	require.Equal(t, []string{"localhost:6379"}, o.InitAddress, "go-redis' default address")
	require.Nil(t, o.DialCtxFn)
	require.False(t, o.AlwaysRESP2)

	o, err = goredis.ClientOption(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}, DB: 4})
	require.NoError(t, err)
	require.Equal(t, []string{"127.0.0.1:1"}, o.InitAddress)
	require.Equal(t, 4, o.SelectDB)
	o, err = goredis.ClientOption(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}, IsClusterMode: true})
	require.NoError(t, err)
	require.Equal(t, []string{"127.0.0.1:1"}, o.InitAddress)
	require.Zero(t, o.SelectDB)
	o, err = goredis.ClientOption(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:3", "s:2"}, MasterName: "m", TLSConfig: cfg})
	require.NoError(t, err)
	require.Equal(t, "m", o.Sentinel.MasterSet)
	require.Equal(t, []string{"127.0.0.1:3", "s:2"}, o.InitAddress)
	require.Equal(t, "redis.internal", o.Sentinel.TLSConfig.ServerName, "TLS for the Sentinels too, as in go-redis")
}

type streaming struct {
	auth.StreamingCredentialsProvider
}

func TestRefused(t *testing.T) {
	onConnect := func(context.Context, *redis.Conn) error { return nil }
	provider := func() (string, string) { return user, password }
	for name, err := range map[string]error{
		"OnConnect":                    optErr(&redis.Options{OnConnect: onConnect}),
		"StreamingCredentialsProvider": optErr(&redis.Options{StreamingCredentialsProvider: streaming{}}),
		"cluster OnConnect":            optErr(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, OnConnect: onConnect}),
		"ClusterSlots": optErr(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			return nil, nil
		}}),
		"ReplicaOnly":               optErr(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:3"}, ReplicaOnly: true}),
		"sentinel with a provider":  optErr(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:3"}, CredentialsProvider: provider}),
		"universal OnConnect":       optErr(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, OnConnect: onConnect}),
		"universal sentinel refuse": optErr(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:3"}, MasterName: "m", CredentialsProvider: provider}),
	} {
		require.ErrorIs(t, err, goredis.ErrUnsupported, name)
		require.ErrorIs(t, err, redisync.ErrInvalidArgument, name)
	}
	for name, err := range map[string]error{
		"nil options":          optErr((*redis.Options)(nil)),
		"nil cluster options":  optErr((*redis.ClusterOptions)(nil)),
		"nil failover options": optErr((*redis.FailoverOptions)(nil)),
		"nil universal":        optErr((*redis.UniversalOptions)(nil)),
		"no cluster address":   optErr(&redis.ClusterOptions{}),
		"no master name":       optErr(&redis.FailoverOptions{SentinelAddrs: []string{"127.0.0.1:3"}}),
		"no sentinel":          optErr(&redis.FailoverOptions{MasterName: "m"}),
	} {
		require.ErrorIs(t, err, redisync.ErrInvalidArgument, name)
		require.False(t, errors.Is(err, goredis.ErrUnsupported), name)
	}
	c, err := goredis.Dial(&redis.Options{Addr: redisAddr, OnConnect: onConnect})
	require.ErrorIs(t, err, goredis.ErrUnsupported, "Dial returns ClientOption's error")
	require.Nil(t, c)
}

// optErr returns ClientOption's error.
func optErr[C goredis.Config](opt C) error {
	_, err := goredis.ClientOption(opt)
	return err
}

// BenchmarkLostAfterDelete measures how long a held lock deleted behind its
// holder (a DEL of its key) takes to be reported by Lost, for a Client from
// Dial with the default watchdog lease, as redisync's benchmark of the same
// name does for its constructors.
//
//	cd goredis && go test -run '^$' -bench BenchmarkLostAfterDelete -benchtime 5x .
func BenchmarkLostAfterDelete(b *testing.B) {
	ctx := context.Background()
	c, err := goredis.Dial(&redis.Options{Addr: redisAddr}, redisync.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(b, err)
	defer c.Close()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	name := b.Name()
	m := c.Mutex(name)
	var total, worst time.Duration
	for b.Loop() {
		l, err := m.Lock(ctx)
		require.NoError(b, err)
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		require.NoError(b, rdb.Del(ctx, "redisync:{"+name+"}").Err())
		select {
		case <-l.Lost():
		case <-time.After(time.Minute):
			b.Fatal("not reported lost within a minute")
		}
		took := time.Since(start)
		require.ErrorIs(b, l.Err(), redisync.ErrExpired)
		total += took
		worst = max(worst, took)
	}
	b.ReportMetric(float64(total)/float64(b.N)/float64(time.Millisecond), "lost-ms")
	b.ReportMetric(float64(worst)/float64(time.Millisecond), "max-lost-ms")
}
