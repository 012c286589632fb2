// Package goredis makes a redisync Client from the configuration of a
// go-redis v9 client (github.com/redis/go-redis/v9): the same servers, the
// same credentials, the same TLS.
//
//	c, err := goredis.Dial(opt) // the *redis.Options the service already has
//	if err != nil { ... }
//	defer c.Close()
//
// opt may be a *redis.Options, *redis.ClusterOptions, *redis.FailoverOptions
// (Sentinel) or *redis.UniversalOptions, the latter read as
// redis.NewUniversalClient reads it. redisync talks to Redis through
// rueidis, so the Client has connections of its own (one multiplexed
// connection per server) beside the go-redis client's pool.
//
// What the options say about where and how to connect is carried over:
//
//	Addr, Addrs, Network             the servers; a Unix socket too
//	MasterName, SentinelAddrs        the primary behind Sentinel
//	Username, Password, DB           the same on every connection
//	CredentialsProvider(Context)     asked at every new connection
//	SentinelUsername, SentinelPassword
//	TLSConfig                        for the servers and the Sentinels
//	Dialer                           dials every connection (TLS is then its job, as in go-redis)
//	ClientName, DialTimeout
//	ReadTimeout, WriteTimeout        the larger, when positive, as rueidis' ConnWriteTimeout
//	Protocol 2                       RESP2 only
//
// What tunes go-redis' pools (pool sizes and timeouts, retries and their
// backoff, buffer sizes), routes its reads (ReadOnly, RouteByLatency,
// RouteRandomly), makes the clients of a Cluster's nodes (NewClient) or
// caches on the client has no counterpart and is ignored: rueidis
// multiplexes, redisync retries its acquisitions itself and sends every
// command to primaries. Client-side caching stays on: the Client tracks
// the keys of the locks it holds with it, to learn of a lost lock within a
// round trip (redisync.DetectOnChange). With Protocol 2 (RESP2, which has
// no invalidations) caching is off and the Client learns of a lost lock at
// its next renewal (redisync.DetectOnRenewal). What would change how a connection behaves and
// cannot be reproduced is refused with ErrUnsupported: OnConnect, a
// StreamingCredentialsProvider, ClusterOptions.ClusterSlots,
// FailoverOptions.ReplicaOnly and UseDisconnectedReplicas (locks live on
// the primary), and a credentials provider behind Sentinel (rueidis would
// give its credentials to the Sentinels as well). Hooks added to a go-redis
// client (AddHook) belong to that client and do not see redisync's
// commands; redisync.WithMetrics reports on its locks.
package goredis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redisync/redisync"
)

// ErrUnsupported reports a go-redis option that cannot be carried over to
// rueidis. It always comes with redisync.ErrInvalidArgument, and the error
// names the option.
var ErrUnsupported = errors.New("goredis: go-redis option has no rueidis counterpart")

// Config is one of the option types of go-redis clients.
type Config interface {
	*redis.Options | *redis.ClusterOptions | *redis.FailoverOptions | *redis.UniversalOptions
}

// Dial connects to the servers opt describes and returns a redisync Client
// that owns the connection (see redisync.Dial); opts are the Client's
// options. opt is not modified. Options that cannot be carried over, a nil
// opt and a Cluster or Sentinel without addresses return
// redisync.ErrInvalidArgument, the first with ErrUnsupported; nothing is
// dialled then. A server that cannot be reached returns rueidis' error.
func Dial[C Config](opt C, opts ...redisync.Option) (*redisync.Client, error) {
	o, err := ClientOption(opt)
	if err != nil {
		return nil, err
	}
	return redisync.Dial(o, opts...)
}

// ClientOption returns the rueidis options that reach the servers opt
// describes, for a rueidis.Client of one's own (redisync.New shares it).
// It returns the errors of Dial, and sends nothing to Redis.
func ClientOption[C Config](opt C) (rueidis.ClientOption, error) {
	switch opt := any(opt).(type) {
	case *redis.Options:
		return fromOptions(opt)
	case *redis.ClusterOptions:
		return fromCluster(opt)
	case *redis.FailoverOptions:
		return fromFailover(opt)
	default:
		return fromUniversal(opt.(*redis.UniversalOptions))
	}
}

func fromOptions(opt *redis.Options) (rueidis.ClientOption, error) {
	if opt == nil {
		return rueidis.ClientOption{}, fmt.Errorf("%w: nil *redis.Options", redisync.ErrInvalidArgument)
	}
	addr, network := opt.Addr, opt.Network
	if addr == "" {
		addr = "localhost:6379" // as go-redis
	}
	if network == "" {
		network = "tcp"
		if strings.HasPrefix(addr, "/") {
			network = "unix"
		}
	}
	o := rueidis.ClientOption{InitAddress: []string{addr}, SelectDB: opt.DB}
	err := conn{
		network: network, clientName: opt.ClientName, username: opt.Username, password: opt.Password,
		credentials: opt.CredentialsProvider, credentialsCtx: opt.CredentialsProviderContext,
		streaming: opt.StreamingCredentialsProvider != nil, onConnect: opt.OnConnect != nil, dialer: opt.Dialer,
		protocol: opt.Protocol, tls: opt.TLSConfig,
		dialTimeout: opt.DialTimeout, readTimeout: opt.ReadTimeout, writeTimeout: opt.WriteTimeout,
	}.apply(&o)
	return o, err
}

func fromCluster(opt *redis.ClusterOptions) (rueidis.ClientOption, error) {
	switch {
	case opt == nil:
		return rueidis.ClientOption{}, fmt.Errorf("%w: nil *redis.ClusterOptions", redisync.ErrInvalidArgument)
	case len(opt.Addrs) == 0:
		return rueidis.ClientOption{}, fmt.Errorf("%w: ClusterOptions without Addrs", redisync.ErrInvalidArgument)
	case opt.ClusterSlots != nil:
		return rueidis.ClientOption{}, unsupported("ClusterOptions.ClusterSlots")
	}
	o := rueidis.ClientOption{InitAddress: append([]string(nil), opt.Addrs...)}
	err := conn{
		network: "tcp", clientName: opt.ClientName, username: opt.Username, password: opt.Password,
		credentials: opt.CredentialsProvider, credentialsCtx: opt.CredentialsProviderContext,
		streaming: opt.StreamingCredentialsProvider != nil, onConnect: opt.OnConnect != nil, dialer: opt.Dialer,
		protocol: opt.Protocol, tls: opt.TLSConfig,
		dialTimeout: opt.DialTimeout, readTimeout: opt.ReadTimeout, writeTimeout: opt.WriteTimeout,
	}.apply(&o)
	return o, err
}

func fromFailover(opt *redis.FailoverOptions) (rueidis.ClientOption, error) {
	switch {
	case opt == nil:
		return rueidis.ClientOption{}, fmt.Errorf("%w: nil *redis.FailoverOptions", redisync.ErrInvalidArgument)
	case opt.MasterName == "" || len(opt.SentinelAddrs) == 0:
		return rueidis.ClientOption{}, fmt.Errorf("%w: FailoverOptions without MasterName or SentinelAddrs", redisync.ErrInvalidArgument)
	case opt.ReplicaOnly || opt.UseDisconnectedReplicas:
		return rueidis.ClientOption{}, unsupported("FailoverOptions.ReplicaOnly and UseDisconnectedReplicas (locks live on the primary)")
	case opt.CredentialsProvider != nil || opt.CredentialsProviderContext != nil:
		return rueidis.ClientOption{}, unsupported("FailoverOptions.CredentialsProvider (rueidis would give its credentials to the Sentinels too)")
	}
	o := rueidis.ClientOption{
		InitAddress: append([]string(nil), opt.SentinelAddrs...),
		SelectDB:    opt.DB,
		Sentinel: rueidis.SentinelOption{
			MasterSet:  opt.MasterName,
			Username:   opt.SentinelUsername,
			Password:   opt.SentinelPassword,
			ClientName: opt.ClientName,
			TLSConfig:  opt.TLSConfig.Clone(),
			Dialer:     net.Dialer{Timeout: opt.DialTimeout, KeepAlive: rueidis.DefaultTCPKeepAlive},
		},
	}
	if o.Sentinel.Dialer.Timeout <= 0 {
		o.Sentinel.Dialer.Timeout = rueidis.DefaultDialTimeout
	}
	err := conn{
		network: "tcp", clientName: opt.ClientName, username: opt.Username, password: opt.Password,
		streaming: opt.StreamingCredentialsProvider != nil, onConnect: opt.OnConnect != nil, dialer: opt.Dialer,
		protocol: opt.Protocol, tls: opt.TLSConfig,
		dialTimeout: opt.DialTimeout, readTimeout: opt.ReadTimeout, writeTimeout: opt.WriteTimeout,
	}.apply(&o)
	return o, err
}

// fromUniversal chooses as redis.NewUniversalClient does: Sentinel when
// MasterName is set, a Cluster for several addresses or IsClusterMode, a
// single server otherwise.
func fromUniversal(opt *redis.UniversalOptions) (rueidis.ClientOption, error) {
	if opt == nil {
		return rueidis.ClientOption{}, fmt.Errorf("%w: nil *redis.UniversalOptions", redisync.ErrInvalidArgument)
	}
	u := *opt // the conversions fill in default addresses
	switch {
	case u.MasterName != "":
		return fromFailover(u.Failover())
	case len(u.Addrs) > 1 || u.IsClusterMode:
		return fromCluster(u.Cluster())
	default:
		return fromOptions(u.Simple())
	}
}

// conn is what the option types of go-redis say about each connection.
type conn struct {
	network, clientName, username, password string
	credentials                             func() (string, string)
	credentialsCtx                          func(context.Context) (string, string, error)
	streaming, onConnect                    bool
	dialer                                  func(ctx context.Context, network, addr string) (net.Conn, error)
	protocol                                int
	tls                                     *tls.Config
	dialTimeout, readTimeout, writeTimeout  time.Duration
}

// apply sets the connection options of o, or reports the first option that
// cannot be carried over.
func (c conn) apply(o *rueidis.ClientOption) error {
	switch {
	case c.onConnect:
		return unsupported("OnConnect")
	case c.streaming:
		return unsupported("StreamingCredentialsProvider")
	}
	o.ClientName, o.Username, o.Password = c.clientName, c.username, c.password
	switch {
	case c.credentialsCtx != nil:
		o.AuthCredentialsFn = func(rueidis.AuthCredentialsContext) (rueidis.AuthCredentials, error) {
			user, password, err := c.credentialsCtx(context.Background())
			return rueidis.AuthCredentials{Username: user, Password: password}, err
		}
	case c.credentials != nil:
		o.AuthCredentialsFn = func(rueidis.AuthCredentialsContext) (rueidis.AuthCredentials, error) {
			user, password := c.credentials()
			return rueidis.AuthCredentials{Username: user, Password: password}, nil
		}
	}
	o.TLSConfig = c.tls.Clone()
	network := c.network
	switch {
	case c.dialer != nil:
		o.DialCtxFn = func(ctx context.Context, addr string, _ *net.Dialer, _ *tls.Config) (net.Conn, error) {
			return c.dialer(ctx, network, addr)
		}
	case network != "tcp":
		o.DialCtxFn = func(ctx context.Context, addr string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
			if cfg != nil {
				return (&tls.Dialer{NetDialer: d, Config: cfg}).DialContext(ctx, network, addr)
			}
			return d.DialContext(ctx, network, addr)
		}
	}
	if c.dialTimeout > 0 {
		o.Dialer.Timeout = c.dialTimeout
	}
	if d := max(c.readTimeout, c.writeTimeout); d > 0 {
		o.ConnWriteTimeout = d
	}
	o.AlwaysRESP2 = c.protocol == 2
	return nil
}

func unsupported(option string) error {
	return fmt.Errorf("%w: %w: %s", redisync.ErrInvalidArgument, ErrUnsupported, option)
}
