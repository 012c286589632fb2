package redisync

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"
)

// The scripts that acquire and release, run the same way by the primitives:
// an acquisition waits for the replicas WithReplicaAck asks for, a release
// answers whether it freed the lock, and an operator's command whether it
// found anything.

// runAcquire runs an acquire script s once on keys with args, and the
// WAIT that WithReplicaAck asks for: an attempt that took the lock (granted
// tells from its reply) and that fewer replicas acknowledged is undone, and
// fails with ErrNotReplicated. undo detaches from ctx itself. late undoes
// an attempt whose reply came after the caller gave up on it (see
// execTaking): it runs beside the caller. op names the operation in errors.
func (c *Client) runAcquire(ctx context.Context, s script, op string, keys, args []string,
	granted func([]rueidis.RedisMessage) bool, undo, late func(context.Context)) ([]rueidis.RedisMessage, error) {
	if c.cfg.ackReplicas == 0 {
		res, err := c.execTaking(ctx, s, keys, args, late).ToArray()
		if err != nil {
			return nil, redisErr(op, err)
		}
		return res, nil
	}
	// The WAIT lasts up to the acknowledgement timeout on a dedicated
	// connection, deaf to a cancellation: it runs as the script alone does,
	// in flight beside a caller that gives up, and undone after it.
	type reply struct {
		res   []rueidis.RedisMessage
		acked int64
		err   error
	}
	keys, args = cloneWords(keys, args)
	r, ok := takeInFlight(c, ctx, func(actx context.Context) (r reply) {
		r.res, r.acked, r.err = s.execAndWait(actx, c.rc, keys, args, c.cfg.ackReplicas, c.cfg.ackTimeout)
		return r
	}, late)
	if !ok {
		r.err = ctx.Err()
	}
	res, acked, err := r.res, r.acked, r.err
	if err != nil {
		return nil, redisErr(op, err)
	}
	if granted(res) && acked < int64(c.cfg.ackReplicas) {
		undo(ctx)
		return nil, fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, acked, c.cfg.ackReplicas, c.cfg.ackTimeout)
	}
	return res, nil
}

// runRelease runs a release script s on keys with args, which answers 1 when
// it freed the lock, 2 when the lock is still held (by other holds of the
// owner) and 0 when the owner held nothing. op names the operation in
// errors.
func (c *Client) runRelease(ctx context.Context, s script, op string, keys, args []string) (releaseState, error) {
	n, err := s.exec(ctx, c.rc, keys, args).AsInt64()
	if err != nil {
		return notHeld, redisErr(op, err)
	}
	return releaseStateOf(n), nil
}

// releaseStateOf reads a release script's answer: 1 freed, 2 still held
// through other holds, anything else not held.
func releaseStateOf(n int64) releaseState {
	switch n {
	case 1:
		return freed
	case 2:
		return stillHeld
	}
	return notHeld
}

// runFound runs a script s on keys with args that answers 1 when it found
// something to act on, and reports whether it did. op names the operation
// in errors.
func (c *Client) runFound(ctx context.Context, s script, op string, keys, args []string) (bool, error) {
	n, err := s.exec(ctx, c.rc, keys, args).AsInt64()
	if err != nil {
		return false, redisErr(op, err)
	}
	return n == 1, nil
}
