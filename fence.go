package redisync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// ErrStaleToken reports a write that the resource refused because a newer
// fencing token has written to it: the lease that carried the token was
// lost, and the lock has had another holder since.
var ErrStaleToken = errors.New("redisync: fencing token older than the resource's")

// FencedSet writes value to key unless a newer fencing token has written to
// key before, in one script: the resource itself refuses the late write of a
// holder that lost its lease while another holder took the lock. token is
// the writer's Lease.Token; a holder may write several times with the same
// token. A refused write returns ErrStaleToken and changes nothing.
//
// key is a hash of two fields: "value", the value, and "token", the token of
// its last write; read it with HGET key value. key is used as given, without
// the Client's prefix, and keeps any expiry it has. A key that holds another
// type returns ErrWrongType. A token of 0 (the token of a failed
// acquisition), an empty key or a nil ctx return ErrInvalidArgument, a
// closed Client ErrClosed; errors from Redis and ctx are returned as they
// come, and the write may or may not have happened.
func (c *Client) FencedSet(ctx context.Context, key, value string, token uint64) error {
	switch {
	case c == nil:
		return fmt.Errorf("%w: nil Client", ErrInvalidArgument)
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidArgument)
	case token == 0:
		return fmt.Errorf("%w: fencing token 0 is no lease's", ErrInvalidArgument)
	case c.isClosed():
		return ErrClosed
	}
	n, err := fencedSetScript.exec(ctx, c.rc, []string{key}, []string{value, strconv.FormatUint(token, 10)}).AsInt64()
	switch {
	case err != nil:
		return redisErr("fenced set", err)
	case n == 0:
		return fmt.Errorf("%w: %s", ErrStaleToken, key)
	}
	return nil
}
