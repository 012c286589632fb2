// Package redisyncotel reports the measurements of a redisync Client
// through OpenTelemetry metrics. It lives in a module of its own, so that
// the redisync module itself does not depend on OpenTelemetry.
//
//	m, err := redisyncotel.Metrics(otel.GetMeterProvider())
//	if err != nil { ... }
//	c, err := redisync.New(rc, redisync.WithMetrics(m))
//
// Instruments (every one has the attribute redisync.primitive, "mutex",
// "fair"... where it applies):
//
//	redisync.acquisitions       counter: successful acquisitions
//	redisync.wait.duration      histogram, seconds: how long acquisitions took
//	redisync.hold.duration      histogram, seconds: how long leases were held until Unlock
//	redisync.lease.losses       counter: leases lost, with redisync.reason
//	                            (expired, taken_over, connection_lost, closed)
//	redisync.renewals           counter: leases in watchdog batches, with
//	                            redisync.outcome (ok, error)
//	redisync.subscriptions      up-down counter: pub/sub subscriptions held
package redisyncotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/redisync/redisync"
)

const scope = "github.com/redisync/redisync"

// Metrics returns the redisync.Metrics that record into instruments of a
// meter from mp. It fails only when mp fails to create an instrument.
func Metrics(mp metric.MeterProvider) (redisync.Metrics, error) {
	m := mp.Meter(scope)
	acquisitions, err1 := m.Int64Counter("redisync.acquisitions", metric.WithDescription("Successful acquisitions."))
	wait, err2 := m.Float64Histogram("redisync.wait.duration", metric.WithUnit("s"), metric.WithDescription("How long acquisitions took, waiting included."))
	hold, err3 := m.Float64Histogram("redisync.hold.duration", metric.WithUnit("s"), metric.WithDescription("How long leases were held until released."))
	losses, err4 := m.Int64Counter("redisync.lease.losses", metric.WithDescription("Leases lost, by reason."))
	renewals, err5 := m.Int64Counter("redisync.renewals", metric.WithDescription("Leases in watchdog renewal batches, by outcome."))
	subs, err6 := m.Int64UpDownCounter("redisync.subscriptions", metric.WithDescription("Pub/sub subscriptions held."))
	if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
		return redisync.Metrics{}, err
	}
	ctx := context.Background()
	kind := func(p string) metric.MeasurementOption {
		return metric.WithAttributes(attribute.String("redisync.primitive", p))
	}
	return redisync.Metrics{
		Acquired: func(p, _ string, waited time.Duration) {
			acquisitions.Add(ctx, 1, kind(p))
			wait.Record(ctx, waited.Seconds(), kind(p))
		},
		Released: func(p, _ string, held time.Duration) {
			hold.Record(ctx, held.Seconds(), kind(p))
		},
		Lost: func(p, _ string, reason error) {
			losses.Add(ctx, 1, metric.WithAttributes(
				attribute.String("redisync.primitive", p), attribute.String("redisync.reason", reasonName(reason))))
		},
		Renewed: func(n int, err error) {
			outcome := "ok"
			if err != nil {
				outcome = "error"
			}
			renewals.Add(ctx, int64(n), metric.WithAttributes(attribute.String("redisync.outcome", outcome)))
		},
		Subscribed: func(delta int) {
			subs.Add(ctx, int64(delta))
		},
	}, nil
}

func reasonName(err error) string {
	switch {
	case errors.Is(err, redisync.ErrForceUnlocked):
		return "force_unlocked"
	case errors.Is(err, redisync.ErrExpired):
		return "expired"
	case errors.Is(err, redisync.ErrTakenOver):
		return "taken_over"
	case errors.Is(err, redisync.ErrConnectionLost):
		return "connection_lost"
	case errors.Is(err, redisync.ErrClosed):
		return "closed"
	}
	return "other"
}
