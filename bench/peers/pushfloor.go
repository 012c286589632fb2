package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// pushScript publishes ARGV[1] on the shard channel KEYS[1] from a script:
// the least a release that hands a lock over by message can run.
var pushScript = rueidis.NewLuaScript("return redis.call('SPUBLISH', KEYS[1], ARGV[1])")

// idlePushes is the hand-off's floor: the latencies of n messages from one
// connection to another's goroutine, each sent after an idle of idle(),
// from just before the send to the receiving goroutine waking with it.
// A sender publishes on a shard channel (SPUBLISH), or runs a script that
// does (viaScript); a second client's subscription hands each message to a
// goroutine blocked on a channel, as a waiter is. Nothing of a lock is
// involved: what is left is what any hand-off by message costs on this
// machine (the sender's write, the server's wake, the receiver's reader
// and the receiving goroutine's wake).
func (e *env) idlePushes(ctx context.Context, n int, idle func() time.Duration, viaScript bool) ([]time.Duration, error) {
	opt := rueidis.ClientOption{InitAddress: []string{e.addr}, DisableCache: true}
	pub, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	sub, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	ch := e.prefix + "pushfloor"
	got := make(chan struct{}, 1)
	subscribed := make(chan struct{})
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	recvDone := make(chan error, 1)
	go func() {
		recvDone <- sub.Receive(rueidis.WithOnSubscriptionHook(sctx, func(rueidis.PubSubSubscription) { close(subscribed) }),
			sub.B().Ssubscribe().Channel(ch).Build(), func(rueidis.PubSubMessage) {
				select {
				case got <- struct{}{}:
				default:
				}
			})
	}()
	select {
	case <-subscribed:
	case err := <-recvDone:
		return nil, fmt.Errorf("SSUBSCRIBE: %w", err)
	case <-time.After(e.size.opTimeout):
		return nil, fmt.Errorf("SSUBSCRIBE: not subscribed within %v", e.size.opTimeout)
	}
	var t0 atomic.Int64
	sendErr := make(chan error, 1)
	lats := make([]time.Duration, 0, n)
	for range n {
		go func() {
			if err := sleep(ctx, idle()); err != nil {
				sendErr <- err
				return
			}
			t0.Store(time.Now().UnixNano())
			var err error
			if viaScript {
				err = pushScript.Exec(ctx, pub, []string{ch}, []string{"1"}).Error()
			} else {
				err = pub.Do(ctx, pub.B().Spublish().Channel(ch).Message("1").Build()).Error()
			}
			sendErr <- err
		}()
		select {
		case <-got:
			lats = append(lats, time.Since(time.Unix(0, t0.Load())))
			if err := <-sendErr; err != nil {
				return nil, err
			}
		case err := <-sendErr:
			if err != nil {
				return nil, err
			}
			select {
			case <-got:
				lats = append(lats, time.Since(time.Unix(0, t0.Load())))
			case <-time.After(e.size.opTimeout):
				return nil, fmt.Errorf("a message sent was not received within %v", e.size.opTimeout)
			}
		}
	}
	return lats, nil
}
