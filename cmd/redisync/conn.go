package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync"
)

// defaultAddr is where Redis is when neither --addr nor $REDIS_URL say,
// and defaultPort its port when --addr has none.
const (
	defaultAddr = "127.0.0.1:6379"
	defaultPort = "6379"
)

// connHelp describes the connection flags, for the help of the commands
// that take them.
const connHelp = `

Redis is $REDIS_URL (redis://[user:password@]host:port/db, or rediss://
for TLS), else 127.0.0.1:6379; --addr, --user, --password and --tls
override it part by part. Prefer REDIS_URL in the environment to
--password on the command line, which other users can see. Clusters and
their redirections are detected. --prefix must match the prefix of the
programs that hold the locks (redisync.WithPrefix).`

// connFlags are the flags every command that talks to Redis takes.
type connFlags struct {
	addr        string
	user        string
	password    string
	tls         bool
	tlsInsecure bool
	tlsCA       string
	prefix      string
	timeout     time.Duration
}

func (f *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "addr", "", "Redis `host:port`, port "+defaultPort+" if left out (default: the address in $REDIS_URL, else "+defaultAddr+")")
	fs.StringVar(&f.user, "user", "", "Redis ACL `user` (default: the user in $REDIS_URL)")
	fs.StringVar(&f.password, "password", "", "Redis `password` (default: the password in $REDIS_URL)")
	fs.BoolVar(&f.tls, "tls", false, "connect with TLS (also implied by rediss:// in $REDIS_URL)")
	fs.BoolVar(&f.tlsInsecure, "tls-insecure", false, "with TLS, do not verify the server's certificate (implies --tls)")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "with TLS, trust the PEM certificates in `file` (implies --tls)")
	fs.StringVar(&f.prefix, "prefix", "redisync", "key `prefix` of the locks (redisync.WithPrefix)")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "`duration` allowed for connecting and for each request")
}

// check reports bad connection flags as usage errors.
func (f *connFlags) check() error {
	switch {
	case f.prefix == "" || strings.ContainsAny(f.prefix, "{}"):
		return usageErrorf("--prefix %q must be non-empty and contain no '{' or '}'", f.prefix)
	case f.timeout <= 0:
		return usageErrorf("--timeout must be positive, got %v", f.timeout)
	}
	return nil
}

// option returns the rueidis options the flags and $REDIS_URL describe,
// and the address(es) they name.
func (f *connFlags) option() (rueidis.ClientOption, string, error) {
	opt := rueidis.ClientOption{InitAddress: []string{defaultAddr}}
	if url := os.Getenv("REDIS_URL"); url != "" {
		if !strings.Contains(url, "://") {
			// Not echoed: it may hold a password.
			return opt, "", errors.New("REDIS_URL has no scheme: write redis://host:port (rediss:// for TLS, unix:///path for a socket)")
		}
		var err error
		if opt, err = rueidis.ParseURL(url); err != nil {
			return opt, "", fmt.Errorf("REDIS_URL: %w", err)
		}
	}
	if f.addr != "" {
		addr, err := withPort(f.addr)
		if err != nil {
			return opt, "", err
		}
		opt.InitAddress = []string{addr}
	}
	if f.user != "" {
		opt.Username = f.user
	}
	if f.password != "" {
		opt.Password = f.password
	}
	if f.tls || f.tlsInsecure || f.tlsCA != "" {
		if opt.TLSConfig == nil {
			opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		opt.TLSConfig.InsecureSkipVerify = f.tlsInsecure
		if f.tlsCA != "" {
			pem, err := os.ReadFile(f.tlsCA)
			if err != nil {
				return opt, "", fmt.Errorf("--tls-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return opt, "", fmt.Errorf("--tls-ca: no PEM certificate in %s", f.tlsCA)
			}
			opt.TLSConfig.RootCAs = pool
		}
	}
	// An operator's look needs none of the client-side cache.
	opt.DisableCache = true
	opt.Dialer.Timeout = f.timeout
	opt.ConnWriteTimeout = f.timeout
	opt.ClientName = "redisync-cli"
	return opt, strings.Join(opt.InitAddress, ","), nil
}

// withPort is addr with the default port when it has none: "localhost",
// "::1" and "[::1]" as well as "localhost:6380".
func withPort(addr string) (string, error) {
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if port == "" {
			return net.JoinHostPort(host, defaultPort), nil
		}
		return addr, nil
	}
	host := strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
	if strings.Contains(host, ":") && net.ParseIP(host) == nil {
		return "", usageErrorf("--addr %q is not host:port", addr)
	}
	return net.JoinHostPort(host, defaultPort), nil
}

// plainText reports whether the server at addr answers a PING in plain
// text: a server without TLS, on which a TLS handshake would wait until the
// timeout. A TLS server answers with an alert, or nothing.
func plainText(ctx context.Context, addr string, timeout time.Duration) bool {
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(min(timeout, time.Second))); err != nil {
		return false
	}
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		return false
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(conn, b); err != nil {
		return false
	}
	return b[0] == '+' || b[0] == '-'
}

// client is the command's connection to Redis: a redisync Client, and the
// rueidis client under it for what the library does not send (CLIENT
// LIST).
type client struct {
	*redisync.Client
	rc rueidis.Client
	// names are the names of the Clients seen holding locks, by client id
	// ("" for a Client without a name).
	names map[string]string
	// prefix is the key prefix of the locks (--prefix).
	prefix string
}

// Close closes the Client and its connection.
func (c *client) Close() error {
	err := c.Client.Close()
	c.rc.Close()
	return err
}

// dial connects to Redis and returns a client. The caller must Close it.
func (f *connFlags) dial(ctx context.Context) (*client, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	opt, where, err := f.option()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opt.TLSConfig != nil && plainText(ctx, opt.InitAddress[0], f.timeout) {
		return nil, fmt.Errorf("connect to Redis at %s: the server answers without TLS: use redis:// rather than rediss://, and no --tls", where)
	}
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("connect to Redis at %s: %w", where, err)
	}
	c, err := redisync.New(rc,
		redisync.WithPrefix(f.prefix),
		redisync.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		rc.Close()
		return nil, err
	}
	return &client{Client: c, rc: rc, names: map[string]string{}, prefix: f.prefix}, nil
}

// request returns the context of one request: ctx bounded by --timeout.
func (f *connFlags) request(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, f.timeout)
}

// oneName returns the single lock name of a command that takes one.
func oneName(args []string) (string, error) {
	switch {
	case len(args) == 0:
		return "", usageErrorf("missing the lock NAME")
	case len(args) > 1:
		return "", usageErrorf("unexpected argument %q after the lock name %q", args[1], args[0])
	case args[0] == "":
		return "", usageErrorf("the lock name is empty")
	}
	return args[0], nil
}
