package redisync

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoffJitters(t *testing.T) {
	b := backoff{first: 10 * time.Millisecond, limit: 80 * time.Millisecond}
	seen := map[time.Duration]bool{}
	for i, want := range []time.Duration{10, 20, 40, 80, 80, 80} {
		d := b.next()
		want *= time.Millisecond
		require.GreaterOrEqual(t, d, want/2, "pause %d", i)
		require.LessOrEqual(t, d, want, "pause %d", i)
		seen[d] = true
	}
	b.reset()
	require.LessOrEqual(t, b.next(), 10*time.Millisecond)
	for range 50 {
		seen[jitter(time.Second)] = true
	}
	require.Greater(t, len(seen), 40, "pauses are drawn at random")
}

// TestWaiterWarnsOnceWhileRedisIsDown: a Lock that retries for seconds
// while Redis is down logs one warning, and its recovery.
func TestWaiterWarnsOnceWhileRedisIsDown(t *testing.T) {
	e := ownServer(t)
	log, lines := newRecorder(slog.LevelInfo)
	m := e.client(t, WithLogger(log)).Mutex(t.Name())
	l, err := m.Lock(context.Background()) // connected, scripts loaded
	require.NoError(t, err)
	require.NoError(t, l.Unlock(context.Background()))
	require.NoError(t, e.server.Kill())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		time.Sleep(2500 * time.Millisecond)
		e.server.Start()
	}()
	l, err = m.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	require.Len(t, matching(lines(), "WARN redisync: acquire failed; retrying"), 1, "%v", lines())
	require.Len(t, matching(lines(), "INFO redisync: acquire failed before; recovered"), 1, "%v", lines())
}
