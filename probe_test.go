package redisync

import (
	"context"
	"testing"
	"time"
)

func TestProbeForcedDuringHeldReply(t *testing.T) {
	for _, detect := range []bool{true, false} {
		eachEnv(t, func(t *testing.T, e *env) {
			c, rf := e.faultyClientDetecting(t, detect, WithWatchdogLease(30*time.Second))
			other := e.client(t)
			ctx := context.Background()
			name := t.Name()
			r := rf.hold(runs(acquireScript), 1, 1000*time.Millisecond)
			got := make(chan *Lease, 1)
			go func() {
				l, err := c.Mutex(name, WithLocalPasses(0, 0)).Lock(ctx)
				if err != nil {
					t.Logf("Lock: %v", err)
				}
				got <- l
			}()
			<-r.Ran()
			ok, err := other.Mutex(name).ForceUnlock(ctx)
			t.Logf("force %v %v", ok, err)
			ol, err := other.Mutex(name, WithLocalPasses(0, 0)).TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			l := <-got
			if l != nil {
				t.Logf("detect %v: delivered token %d (other %d) err %v", detect, l.Token(), ol.Token(), l.Err())
				time.Sleep(300 * time.Millisecond)
				t.Logf("detect %v: 300ms later err %v", detect, l.Err())
				l.Unlock(ctx)
			}
			ol.Unlock(ctx)
		})
	}
}
