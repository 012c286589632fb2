package main

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// runF: a client holds a lock with a short lease; after a random part of a
// renewal period, another connection DELs the lock's key. It measures the
// time from sending the DEL until the library reports the lease lost.
func runF(ctx context.Context, e *env, lib *library) (metrics, error) {
	s := e.size
	lease := s.shortLease
	period := lib.renewal(lease)
	c, err := lib.connect(e.cfg(lease))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var lats []time.Duration
	missed := 0
	for i := range s.fSamples {
		name := "f:" + strconv.Itoa(i)
		lctx, cancel := context.WithTimeout(ctx, s.opTimeout)
		h, err := c.Lock(lctx, name)
		cancel()
		if err != nil {
			return nil, err
		}
		key := lib.key(e.prefix, name)
		n, err := e.obs.Do(ctx, e.obs.B().Exists().Key(key).Build()).AsInt64()
		if err == nil && n != 1 {
			err = fmt.Errorf("the lock's key %q is not in Redis", key)
		}
		if err == nil {
			err = sleep(ctx, jitter(period))
		}
		t0 := time.Now()
		if err == nil {
			err = e.obs.Do(ctx, e.obs.B().Del().Key(key).Build()).Error()
		}
		if err != nil {
			_ = unlockSoon(ctx, h, s.opTimeout)
			return nil, err
		}
		select {
		case <-h.lost:
			lats = append(lats, time.Since(t0))
		case <-time.After(2*lease + time.Second):
			missed++
			e.warn(fmt.Errorf("loss of %s not reported within %v", name, 2*lease+time.Second))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		_ = unlockSoon(ctx, h, s.opTimeout) // not held any more: errors expected
	}
	m := metrics{"F.period": ms(period), "F.missed": float64(missed), "F.n": float64(s.fSamples)}
	if len(lats) > 0 {
		m["F.p50"] = ms(percentile(lats, 50))
		m["F.max"] = ms(percentile(lats, 100))
	}
	return m, nil
}
