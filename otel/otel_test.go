package redisyncotel

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMetrics(t *testing.T) {
	srv := redistest.Standalone(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	m, err := Metrics(mp)
	require.NoError(t, err)
	opt := rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true}
	quiet := redisync.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	c, err := redisync.Dial(opt, redisync.WithMetrics(m), redisync.WithWatchdogLease(300*time.Millisecond), quiet)
	require.NoError(t, err)
	defer c.Close()
	other, err := redisync.Dial(opt, quiet)
	require.NoError(t, err)
	defer other.Close()
	ctx := context.Background()

	l, err := c.Mutex("a").Lock(ctx)
	require.NoError(t, err)
	time.Sleep(250 * time.Millisecond) // a renewal or two
	require.NoError(t, l.Unlock(ctx))
	held, err := other.Mutex("b").Lock(ctx)
	require.NoError(t, err)
	w := c.FairMutex("b").Acquire(ctx) // a different lock: acquired at once
	wl := <-w
	require.NoError(t, wl.Err())
	lost, err := c.Mutex("c").Lock(ctx)
	require.NoError(t, err)
	_, err = c.Mutex("c").ForceUnlock(ctx)
	require.NoError(t, err)
	<-lost.Lost()
	require.NoError(t, wl.Unlock(ctx))
	require.NoError(t, held.Unlock(ctx))

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, mm := range sm.Metrics {
			got[mm.Name] = mm.Data
		}
	}
	sum := func(name string, attrs ...attribute.KeyValue) int64 {
		s, ok := got[name].(metricdata.Sum[int64])
		require.True(t, ok, "%s missing", name)
		var n int64
		for _, dp := range s.DataPoints {
			match := true
			for _, a := range attrs {
				if v, ok := dp.Attributes.Value(a.Key); !ok || v != a.Value {
					match = false
				}
			}
			if match {
				n += dp.Value
			}
		}
		return n
	}
	require.EqualValues(t, 2, sum("redisync.acquisitions", attribute.String("redisync.primitive", "mutex")))
	require.EqualValues(t, 1, sum("redisync.acquisitions", attribute.String("redisync.primitive", "fair")))
	require.EqualValues(t, 1, sum("redisync.lease.losses", attribute.String("redisync.reason", "force_unlocked")))
	require.Positive(t, sum("redisync.renewals", attribute.String("redisync.outcome", "ok")))
	h, ok := got["redisync.hold.duration"].(metricdata.Histogram[float64])
	require.True(t, ok)
	var holds uint64
	for _, dp := range h.DataPoints {
		holds += dp.Count
	}
	require.EqualValues(t, 2, holds)
	_, ok = got["redisync.wait.duration"].(metricdata.Histogram[float64])
	require.True(t, ok)
}
