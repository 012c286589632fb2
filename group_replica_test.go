package redisync

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// beforeSend is a rueidis.Client that shows each command's words to before
// just before it is sent, on dedicated connections too.
type beforeSend struct {
	rueidis.Client
	before func(cmd []string)
}

// show shows cmds to before and returns them.
func show(before func(cmd []string), cmds ...rueidis.Completed) []rueidis.Completed {
	for _, cmd := range cmds {
		before(cmd.Commands())
	}
	return cmds
}

func (b beforeSend) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	return b.Client.Do(ctx, show(b.before, cmd)[0])
}

func (b beforeSend) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	return b.Client.DoMulti(ctx, show(b.before, cmds...)...)
}

func (b beforeSend) Dedicated(fn func(rueidis.DedicatedClient) error) error {
	return b.Client.Dedicated(func(d rueidis.DedicatedClient) error {
		return fn(dedicatedBeforeSend{d, b.before})
	})
}

// dedicatedBeforeSend is beforeSend's dedicated connection.
type dedicatedBeforeSend struct {
	rueidis.DedicatedClient
	before func(cmd []string)
}

func (d dedicatedBeforeSend) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	return d.DedicatedClient.Do(ctx, show(d.before, cmd)[0])
}

func (d dedicatedBeforeSend) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	return d.DedicatedClient.DoMulti(ctx, show(d.before, cmds...)...)
}

// onFirstRaise returns a Client of e made with opts that calls raise just
// before it first sends a raise of a fencing counter (group_fence.lua), on
// a dedicated connection too; closed at the end of the test.
func onFirstRaise(t *testing.T, e *env, raise func(), opts ...Option) *Client {
	t.Helper()
	raises := runs(groupFenceScript)
	var once sync.Once
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: e.addrs})
	require.NoError(t, err)
	c, err := New(beforeSend{rc, func(cmd []string) {
		if raises(cmd) {
			once.Do(raise)
		}
	}}, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		c.Close()
		rc.Close()
	})
	return c
}

// A Group taken one lock at a time (its locks through two Clients) raises
// the fencing counter of each member to the group's token T before its
// Lease is delivered; with WithReplicaAck, the replica must have those
// raises too: a replica promoted without one would give that lock's next
// owner a token below T. Here the replica hears nothing from the moment
// the raise is sent (after it acknowledged both members' grants), and the
// primary dies: the group must not have been delivered, or every token
// the promoted replica hands out for its locks is above T.
func TestGroupFenceReplicaAck(t *testing.T) {
	e := ownServer(t)
	p, replica := proxiedReplica(t, e)
	opts := []Option{WithReplicaAck(1, 300*time.Millisecond), WithLogger(quietLogger())}
	spied := onFirstRaise(t, e, p.Blackhole, opts...)
	other := e.client(t, opts...)
	ctx := withTimeout(t, 30*time.Second)

	// The lock of the spied Client has a hash with an old token; the other
	// lock is taken fresh, with the server's clock now: a greater token,
	// the group's, to which the first lock's counter is raised.
	lo := spied.Mutex(t.Name() + ":lo")
	l := mustLock(t, ctx, lo.Lock)
	require.NoError(t, l.Unlock(ctx))
	time.Sleep(5 * time.Millisecond)
	hi := other.Mutex(t.Name() + ":hi")
	g := NewGroup(lo, hi)
	gl, gerr := g.TryLock(ctx)
	var groupToken uint64
	if gerr == nil {
		groupToken = gl.Token()
	}

	// Failover to the replica, which never saw what its primary did since
	// the raise was sent.
	require.NoError(t, e.server.Kill())
	require.NoError(t, p.Close())
	_, err := replica.Do("REPLICAOF", "NO", "ONE")
	require.NoError(t, err)
	after := dial(t, []string{replica.Addr}, WithLogger(quietLogger())).Mutex(t.Name() + ":lo")
	_, err = after.ForceUnlock(ctx)
	require.NoError(t, err)
	ol := mustLock(t, ctx, after.Lock)
	require.NoError(t, ol.Unlock(ctx))
	if gerr == nil {
		require.Greater(t, ol.Token(), groupToken, "the group's token was handed out again after the failover")
	}
	require.ErrorIs(t, gerr, ErrNotReplicated, "the group was delivered with a fence the replica never acknowledged")
}

// TestGroupMemberLostWhileAckedRaiseIsNotDelivered is
// TestGroupMemberLostWhileCountersRaisedIsNotDelivered with WithReplicaAck:
// the raise's WAIT answers late (the replication stream delayed from the
// moment the raise is sent), and the other member is lost meanwhile. A
// raise the replica acknowledged vouches for no more than one without
// replicas: the group is not delivered with the lost member, it is taken
// again.
func TestGroupMemberLostWhileAckedRaiseIsNotDelivered(t *testing.T) {
	e := ownServer(t)
	p, _ := proxiedReplica(t, e)
	opts := []Option{WithReplicaAck(1, 5*time.Second), WithLogger(quietLogger())}
	raised := make(chan struct{})
	spied := onFirstRaise(t, e, func() {
		p.SetLatency(time.Second)
		close(raised)
	}, opts...)
	other := e.client(t, opts...)
	require.Equal(t, DetectOnChange, other.LossDetection())
	ctx := withTimeout(t, 30*time.Second)
	// As in TestGroupFenceReplicaAck: the spied Client's lock is raised to
	// the other's token.
	lo := spied.Mutex(t.Name() + ":lo")
	require.NoError(t, mustLock(t, ctx, lo.Lock).Unlock(ctx))
	time.Sleep(5 * time.Millisecond)
	hi := other.Mutex(t.Name() + ":hi")
	l := lockWhileMemberLost(t, ctx, NewGroup(lo, hi).Lock, raised, func() {
		_, err := e.server.Do("DEL", hi.keys.lock)
		require.NoError(t, err)
		awaitLossReported(t, other, hi.keys.lock)
	}, func() { p.SetLatency(0) }, lo, hi)
	require.NoError(t, l.Unlock(ctx))
}
