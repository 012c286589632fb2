package redisync

import (
	"log/slog"
	"math/rand/v2"
	"time"
)

// backoff is the pause between retries of an operation that keeps failing:
// it starts at first and doubles up to limit, and each pause is drawn from
// the upper half of that at random, so that clients that failed together
// (an outage) do not all come back in the same instant.
type backoff struct {
	first, limit time.Duration
	cur          time.Duration
}

// next returns the next pause.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.first
	} else {
		b.cur = min(2*b.cur, b.limit)
	}
	return jitter(b.cur)
}

// reset starts again from first: the operation succeeded.
func (b *backoff) reset() { b.cur = 0 }

// errorBackoff is the backoff of attempts that failed with errors: 10ms at
// first, up to a second.
func errorBackoff() backoff { return backoff{first: 10 * time.Millisecond, limit: time.Second} }

// jitter is d less a random part of its lower half.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// retryLog reports an operation that is retried while it fails, without a
// line per retry: the first failure at WARN, the next ones at Debug, and
// the recovery, with the number of failures, at INFO.
type retryLog struct {
	log      *slog.Logger
	msg      string // what failed, "redisync: acquire failed"
	failures int
	since    time.Time
}

// failed reports one failure.
func (r *retryLog) failed(args ...any) {
	r.failures++
	if r.failures == 1 {
		r.since = time.Now()
		r.log.Warn(r.msg+"; retrying", args...)
		return
	}
	r.log.Debug(r.msg+"; retrying", append(args, "failures", r.failures)...)
}

// succeeded reports a success: the recovery, if there were failures.
func (r *retryLog) succeeded(args ...any) {
	if r.failures == 0 {
		return
	}
	r.log.Info(r.msg+" before; recovered", append(args, "failures", r.failures, "after", time.Since(r.since).Round(time.Millisecond))...)
	r.failures = 0
}
