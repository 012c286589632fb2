package redisync

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

func TestLossDetectionMode(t *testing.T) {
	e := standaloneEnv(t)
	require.Equal(t, DetectOnChange, e.client(t).LossDetection())
	require.Equal(t, DetectOnRenewal, e.renewalClient(t).LossDetection())
	require.Equal(t, DetectOnRenewal, dial(t, e.addrs).LossDetection())
	require.Equal(t, "on change", DetectOnChange.String())
	require.Equal(t, DetectOnRenewal, (*Client)(nil).LossDetection())
}

// lostWithin waits for l's loss, at most d, and returns how long it took
// from since.
func lostWithin(t *testing.T, l *Lease, since time.Time, d time.Duration) time.Duration {
	t.Helper()
	select {
	case <-l.Lost():
		return time.Since(since)
	case <-time.After(d):
		t.Fatalf("Lost not closed %v after the change", d)
		return 0
	}
}

// TestLostSoonAfterKeyChanges: with the default watchdog lease (renewals
// every 10 s), a held lock deleted, overwritten or force-unlocked behind its
// holder is reported lost at once, with its reason.
func TestLostSoonAfterKeyChanges(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		admin := e.rueidisClient(t)
		other := e.client(t)
		for _, tc := range []struct {
			name   string
			change func(m *Mutex) error
			reason error
		}{
			{"deleted", func(m *Mutex) error { return admin.Do(ctx, admin.B().Del().Key(m.keys.lock).Build()).Error() }, ErrExpired},
			{"overwritten", func(m *Mutex) error {
				return admin.Do(ctx, admin.B().Hset().Key(m.keys.lock).FieldValue().FieldValue("owner", "someone:1").Build()).Error()
			}, ErrTakenOver},
			{"force-unlocked", func(m *Mutex) error { _, err := other.Mutex(m.name).ForceUnlock(ctx); return err }, ErrForceUnlocked},
			{"flushed", func(m *Mutex) error { return admin.Do(ctx, admin.B().Flushall().Build()).Error() }, ErrExpired},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if tc.name == "flushed" && e.cluster != nil {
					t.Log("FLUSHALL on the node of the key")
				}
				m := c.Mutex(t.Name())
				trials := 5
				if tc.name == "deleted" {
					trials = 20
				}
				var took []time.Duration
				for range trials {
					l, err := m.Lock(ctx)
					require.NoError(t, err)
					time.Sleep(50 * time.Millisecond) // held a while: tracked
					start := time.Now()
					if tc.name == "flushed" && e.cluster != nil {
						master, _ := slotOwner(t, e.cluster, m.keys.lock)
						_, err = master.Do("FLUSHALL")
					} else {
						err = tc.change(m)
					}
					require.NoError(t, err)
					took = append(took, lostWithin(t, l, start, 2*time.Second))
					require.ErrorIs(t, l.Err(), tc.reason)
					require.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
					admin.Do(ctx, admin.B().Del().Key(m.keys.lock).Build())
				}
				slices.Sort(took)
				t.Logf("Lost %v after the change: median %v, max %v", tc.reason, took[len(took)/2], took[len(took)-1])
			})
		}
	})
}

// TestForceUnlockedMatchesExpired: code that checks ErrExpired keeps
// working for a forced unlock.
func TestForceUnlockedMatchesExpired(t *testing.T) {
	require.ErrorIs(t, ErrForceUnlocked, ErrExpired)
	require.ErrorIs(t, ErrForceUnlocked, ErrForceUnlocked)
	require.NotErrorIs(t, ErrExpired, ErrForceUnlocked)
	require.Equal(t, "redisync: lock force-unlocked", ErrForceUnlocked.Error())
}

// TestLostSoonAfterChangeInFirstMoments: a lock changed before its key was
// first read for tracking is reported lost by that read.
func TestLostSoonAfterChangeInFirstMoments(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.client(t)
		admin := e.rueidisClient(t)
		m := c.Mutex(t.Name())
		l := mustLock(t, ctx, m.Lock)
		start := time.Now()
		require.NoError(t, admin.Do(ctx, admin.B().Del().Key(m.keys.lock).Build()).Error())
		took := lostWithin(t, l, start, 2*time.Second)
		require.ErrorIs(t, l.Err(), ErrExpired)
		t.Logf("lost %v after a DEL right after Lock", took)
	})
}

// TestLostSoonAfterRestartWithoutData: a server that comes back empty (no
// persistence) is checked as soon as it answers: the lease is lost with
// ErrExpired long before the watchdog's next renewal.
func TestLostSoonAfterRestartWithoutData(t *testing.T) {
	e := ownServer(t)
	ctx := context.Background()
	c := e.client(t)
	l := mustLock(t, ctx, c.Mutex(t.Name()).Lock)
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, e.server.Restart())
	up := time.Now()
	took := lostWithin(t, l, up, 3*time.Second)
	require.ErrorIs(t, l.Err(), ErrExpired)
	t.Logf("lost %v after the server was back", took)
}

// TestRenewalModeFindsLossOnRenewal: a Client made with New still reports a
// deleted lock, at its next renewal.
func TestRenewalModeFindsLossOnRenewal(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := e.renewalClient(t, WithWatchdogLease(600*time.Millisecond)).Mutex(t.Name())
		l := mustLock(t, ctx, m.Lock)
		_, err := m.ForceUnlock(ctx)
		require.NoError(t, err)
		lostWithin(t, l, time.Now(), 5*time.Second)
		require.ErrorIs(t, l.Err(), ErrForceUnlocked)
	})
}

// TestNoFalseLoss hands one Mutex between 8 Clients (7 500 times, 100 000
// under REDISYNC_SOAK), each holder unlocking
// at once and some acquisitions cancelled by short deadlines (Lock and
// Acquire). Nothing is ever lost there: no lease released by a successful
// Unlock reports a loss, no lease received from Acquire with a nil Err is
// released under its receiver, and nothing is logged at WARN or counted as
// lost.
func TestNoFalseLoss(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		// Hand-offs to reach; attempts are bounded at twice as many.
		total := soak(7500, 100000)
		var counted atomic.Int64
		log, lines := newRecorder(slog.LevelWarn)
		metrics := Metrics{Lost: func(string, string, error) { counted.Add(1) }}
		clients := e.clients(t, 8, WithLogger(log), WithMetrics(metrics))
		name := t.Name()
		var left, handed atomic.Int64
		left.Store(int64(2 * total))
		var (
			mu       sync.Mutex
			released []*Lease
			errs     []error
		)
		fail := func(err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		var wg sync.WaitGroup
		for i := range 16 {
			c := clients[i%len(clients)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				m := c.Mutex(name)
				for left.Add(-1) >= 0 && handed.Load() < int64(total) {
					timeout := time.Hour
					if rand.IntN(4) == 0 {
						timeout = time.Duration(rand.IntN(3000)) * time.Microsecond
					}
					ctx, cancel := context.WithTimeout(context.Background(), timeout)
					var l *Lease
					if rand.IntN(2) == 0 {
						l, _ = m.Lock(ctx)
					} else {
						select {
						case l = <-m.Acquire(ctx):
						case <-ctx.Done():
						}
					}
					cancel()
					if l == nil || l.Err() != nil {
						continue
					}
					if err := l.Unlock(context.Background()); err != nil {
						fail(err)
						continue
					}
					handed.Add(1)
					mu.Lock()
					released = append(released, l)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		require.Empty(t, errs, "a lease received held could not be released")
		// Late answers (renewals, tracking reads) have had time to arrive.
		time.Sleep(300 * time.Millisecond)
		falseLosses := 0
		for _, l := range released {
			select {
			case <-l.Lost():
				falseLosses++
				t.Logf("released lease reports %v", l.Err())
			default:
			}
		}
		t.Logf("%d attempts, %d acquired and released", 2*int64(total)-max(left.Load(), 0), len(released))
		require.GreaterOrEqual(t, len(released), total)
		require.Zero(t, falseLosses, "released leases reported lost")
		require.Empty(t, matching(lines(), "lease lost"), "lease lost logged at WARN")
		require.Zero(t, counted.Load(), "losses counted in Metrics.Lost")
	})
}

// TestDialRESP2: Dial and DialURL connect with RESP2 (caching off, as
// invalidations need RESP3): the Client locks and unlocks, its
// LossDetection is DetectOnRenewal, and it still reports a deleted lock, at
// its next renewal.
func TestDialRESP2(t *testing.T) {
	e := standaloneEnv(t)
	ctx := context.Background()
	opts := []Option{WithLogger(quietLogger()), WithWatchdogLease(600 * time.Millisecond)}
	byOption, err := Dial(rueidis.ClientOption{InitAddress: e.addrs, AlwaysRESP2: true}, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { byOption.Close() })
	byURL, err := DialURL("redis://"+e.addrs[0]+"/0?protocol=2", opts...)
	require.NoError(t, err)
	t.Cleanup(func() { byURL.Close() })
	admin := e.rueidisClient(t)
	for name, c := range map[string]*Client{"Dial": byOption, "DialURL": byURL} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, DetectOnRenewal, c.LossDetection())
			m := c.Mutex(t.Name())
			l := mustLock(t, ctx, m.Lock)
			require.NoError(t, l.Unlock(ctx))
			l = mustLock(t, ctx, m.Lock)
			require.NoError(t, admin.Do(ctx, admin.B().Del().Key(m.keys.lock).Build()).Error())
			lostWithin(t, l, time.Now(), 5*time.Second)
			require.ErrorIs(t, l.Err(), ErrExpired)
		})
	}
}

// TestDialRejectsBadRueidisOptions: options rueidis refuses come back as
// ErrInvalidArgument, with rueidis' error.
func TestDialRejectsBadRueidisOptions(t *testing.T) {
	e := standaloneEnv(t)
	for name, tc := range map[string]struct {
		opt     rueidis.ClientOption
		rueidis error
	}{
		"no address":         {rueidis.ClientOption{}, rueidis.ErrNoAddr},
		"pipeline multiplex": {rueidis.ClientOption{InitAddress: e.addrs, PipelineMultiplex: rueidis.MaxPipelineMultiplex + 1}, rueidis.ErrWrongPipelineMultiplex},
		"redirect and replicas": {rueidis.ClientOption{InitAddress: e.addrs, Standalone: rueidis.StandaloneOption{
			EnableRedirect: true, ReplicaAddress: []string{e.addrs[0]}}}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Dial(tc.opt)
			require.Nil(t, c)
			require.ErrorIs(t, err, ErrInvalidArgument)
			if tc.rueidis != nil {
				require.ErrorIs(t, err, tc.rueidis)
			}
		})
	}
}

// TestNewDetectChanges: Clients made with New on a rueidis.Client whose
// option went through DetectChanges learn of a deleted lock about a round
// trip later, not at the next renewal (10 s with the default lease), each
// of several sharing it, also after another one closed; the option's own
// hook still runs.
func TestNewDetectChanges(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var userHook atomic.Int64
		opt := rueidis.ClientOption{InitAddress: e.addrs, OnInvalidations: func([]rueidis.RedisMessage) { userHook.Add(1) }}
		detect := DetectChanges(&opt)
		rc, err := rueidis.NewClient(opt)
		require.NoError(t, err)
		t.Cleanup(rc.Close)
		newClient := func() *Client {
			c, err := New(rc, detect, WithLogger(quietLogger()))
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			require.Equal(t, DetectOnChange, c.LossDetection())
			return c
		}
		first, second := newClient(), newClient()
		admin := e.rueidisClient(t)
		deleted := func(c *Client) {
			t.Helper()
			m := c.Mutex(t.Name())
			l := mustLock(t, ctx, m.Lock)
			time.Sleep(50 * time.Millisecond) // held a while: tracked
			start := time.Now()
			require.NoError(t, admin.Do(ctx, admin.B().Del().Key(m.keys.lock).Build()).Error())
			took := lostWithin(t, l, start, 3*time.Second)
			require.ErrorIs(t, l.Err(), ErrExpired)
			t.Logf("lost %v after the DEL", took)
		}
		deleted(first)
		deleted(second)
		require.NoError(t, first.Close())
		deleted(second)
		require.Positive(t, userHook.Load(), "the option's own hook was not called")
	})
}

// TestDetectChangesOptions: without client-side caching DetectChanges
// installs nothing and New's Client stays on renewal; a nil option is
// refused.
func TestDetectChangesOptions(t *testing.T) {
	e := standaloneEnv(t)
	for _, opt := range []rueidis.ClientOption{
		{InitAddress: e.addrs, DisableCache: true},
		{InitAddress: e.addrs, DisableCache: true, AlwaysRESP2: true},
	} {
		detect := DetectChanges(&opt)
		require.Nil(t, opt.OnInvalidations)
		rc, err := rueidis.NewClient(opt)
		require.NoError(t, err)
		c, err := New(rc, detect)
		require.NoError(t, err)
		require.Equal(t, DetectOnRenewal, c.LossDetection())
		require.NoError(t, c.Close())
		rc.Close()
	}
	_, err := New(e.rueidisClient(t), DetectChanges(nil))
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// BenchmarkLostAfterDelete measures how long a held lock deleted behind its
// holder (a DEL of its key) takes to be reported by Lost, for a Client of
// each constructor with its default watchdog lease (30 s): New alone finds
// it at the next renewal, the others through invalidations. Each op holds
// a lock 50 ms (long enough to be tracked), deletes it and waits. Run it
// with -benchtime Nx: an op of New takes up to 10 s.
//
//	GOWORK=off go test -run '^$' -bench BenchmarkLostAfterDelete -benchtime 5x .
func BenchmarkLostAfterDelete(b *testing.B) {
	e := standaloneEnv(b)
	admin := e.rueidisClient(b)
	constructors := []struct {
		name string
		make func(b *testing.B) *Client
	}{
		{"New", func(b *testing.B) *Client { return e.renewalClient(b) }},
		{"New+DetectChanges", func(b *testing.B) *Client {
			opt := rueidis.ClientOption{InitAddress: e.addrs}
			detect := DetectChanges(&opt)
			rc, err := rueidis.NewClient(opt)
			require.NoError(b, err)
			b.Cleanup(rc.Close)
			c, err := New(rc, detect, WithLogger(quietLogger()))
			require.NoError(b, err)
			b.Cleanup(func() { c.Close() })
			return c
		}},
		{"Dial", func(b *testing.B) *Client { return e.client(b) }},
		{"DialURL", func(b *testing.B) *Client {
			c, err := DialURL("redis://"+e.addrs[0], WithLogger(quietLogger()))
			require.NoError(b, err)
			b.Cleanup(func() { c.Close() })
			return c
		}},
	}
	for _, k := range constructors {
		b.Run(k.name, func(b *testing.B) {
			ctx := context.Background()
			m := k.make(b).Mutex(b.Name())
			var total, worst time.Duration
			for b.Loop() {
				l, err := m.Lock(ctx)
				require.NoError(b, err)
				time.Sleep(50 * time.Millisecond)
				start := time.Now()
				require.NoError(b, admin.Do(ctx, admin.B().Del().Key(m.keys.lock).Build()).Error())
				select {
				case <-l.Lost():
				case <-time.After(time.Minute):
					b.Fatal("not reported lost within a minute")
				}
				took := time.Since(start)
				require.ErrorIs(b, l.Err(), ErrExpired)
				total += took
				worst = max(worst, took)
			}
			b.ReportMetric(float64(total)/float64(b.N)/float64(time.Millisecond), "lost-ms")
			b.ReportMetric(float64(worst)/float64(time.Millisecond), "max-lost-ms")
		})
	}
}

// TestProbeIgnoresReplicas: a probe for a lock's owner, which asks every
// node the Client knows, takes no answer from a replica, whose copy may lag
// behind or differ: only a master's answer settles the lease.
func TestProbeIgnoresReplicas(t *testing.T) {
	e := ownServer(t)
	replica := e.replica(t)
	ctx := withTimeout(t, 10*time.Second)
	c := e.client(t)
	l, err := c.Mutex("probe").Lock(ctx)
	require.NoError(t, err)
	defer l.Unlock(ctx)
	// The replica's copy says somebody else holds the lock.
	_, err = replica.Do("CONFIG", "SET", "replica-read-only", "no")
	require.NoError(t, err)
	_, err = replica.Do("HSET", c.keysFor("probe").lock, "owner", "someone:1")
	require.NoError(t, err)
	node := func(addr string) rueidis.Client {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
		require.NoError(t, err)
		t.Cleanup(rc.Close)
		return rc
	}
	master, copyNode := node(e.server.Addr), node(replica.Addr)
	none := func(string) rueidis.Client { return nil }
	_, ok := c.tracker.probeOne(ctx, map[string]rueidis.Client{replica.Addr: copyNode}, none, l.h)
	require.False(t, ok, "a replica's answer settled the lease")
	for range 10 { // whichever node the map yields first
		state, ok := c.tracker.probeOne(ctx, map[string]rueidis.Client{replica.Addr: copyNode, e.server.Addr: master}, none, l.h)
		require.True(t, ok)
		require.Equal(t, int64(1), state, "the master says the lease holds")
	}
}
