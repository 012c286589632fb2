package redisync

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/redis/rueidis"
)

// DialURL connects to the Redis deployment a URL names and returns a Client
// that owns the connection, as Dial does. The URL is parsed by
// rueidis.ParseURL:
//
//	redis://[user:password@]host:port[/db]           a server, or a Cluster through one of its nodes
//	rediss://[user:password@]host:port[/db]          the same over TLS (skip_verify=true: no certificate check)
//	unix://[user:password@]/path/to/redis.sock[?db=N] a Unix socket
//	redis://host1:port?addr=host2:port&addr=...      several seed nodes of a Cluster
//	redis://sentinel1:port?addr=sentinel2:port&master_set=NAME
//	                                                 the primary the Sentinels monitor as NAME
//
// Query parameters also set dial_timeout and write_timeout (Go durations),
// client_name, protocol=2 (RESP2 only, without client-side caching: the
// Client's LossDetection is then DetectOnRenewal), client_cache=0 and
// max_retries=0.
// A Cluster is detected by asking the server. Behind Sentinel, the user and
// password are the primary's: the Sentinels are asked without credentials.
//
// A URL that does not parse returns ErrInvalidArgument (errors.Is), with
// rueidis' reason; nothing is dialled. A server that cannot be reached
// returns rueidis' connection error. opts are the Client's options, as for
// New.
func DialURL(redisURL string, opts ...Option) (*Client, error) {
	opt, err := rueidis.ParseURL(redisURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL and its password
		}
		return nil, fmt.Errorf("%w: Redis URL: %w", ErrInvalidArgument, err)
	}
	return Dial(opt, opts...)
}
