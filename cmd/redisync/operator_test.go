package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/internal/redistest"
)

// TestOperatorCommands runs inspect, unlock and watch against a real
// redis-server while the test process holds locks with the library.
func TestOperatorCommands(t *testing.T) {
	bin := buildCLI(t)
	srv := redistest.Standalone(t)
	addr := []string{"--addr", srv.Addr}
	ctx := t.Context()

	// cli runs the binary with --addr after the arguments.
	cli := func(t *testing.T, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		return runCLI(t, bin, append(args, addr...)...)
	}

	t.Run("inspect mutex", func(t *testing.T) {
		t.Parallel()
		c := dialT(t, srv.Addr)
		l := mustLock(t, ctx, c.Mutex("op:mutex").Lock)
		mustLock(t, l.Context(), c.Mutex("op:mutex").Lock) // a re-entry

		stdout, stderr, code := cli(t, "inspect", "op:mutex")
		require.Equal(t, 0, code, stderr)
		require.Empty(t, stderr)
		require.Contains(t, stdout, `mutex "op:mutex"`)
		require.Regexp(t, `(?m)^  holder: +`+c.ID()+`:[0-9]+$`, stdout)
		require.Regexp(t, `(?m)^  client: +`+c.ID()+`$`, stdout)
		require.Regexp(t, `(?m)^  holds: +2$`, stdout)
		require.Regexp(t, `(?m)^  ttl: +[0-9.]+(ms|s)$`, stdout)
		require.Regexp(t, `(?m)^  token: +`+strconv.FormatUint(l.Token(), 10)+`$`, stdout)
		require.NotContains(t, stdout, "fair")
	})

	t.Run("inspect keys", func(t *testing.T) {
		t.Parallel()
		c := dialT(t, srv.Addr)
		// A plain name, one with a hash tag of its own, one with braces
		// that are no tag.
		for _, name := range []string{"op:keys", "{user:7}:op-keys", "op}keys{x"} {
			mustLock(t, ctx, c.Mutex(name).Lock)
			mustLock(t, ctx, c.FairMutex(name).Lock)
			mustLock(t, ctx, c.RWMutex(name).Lock)
			s := c.Semaphore(name)
			_, err := s.SetSize(ctx, 2)
			require.NoError(t, err)
			mustLock(t, ctx, func(ctx context.Context) (*redisync.Lease, error) { return s.Lock(ctx, 1) })
			_, err = c.Latch(name).TrySetCount(ctx, 3)
			require.NoError(t, err)

			stdout, stderr, code := cli(t, "inspect", "--json", name)
			require.Equal(t, 0, code, stderr)
			var got struct {
				Kinds []struct {
					Kind string   `json:"kind"`
					Keys []string `json:"keys"`
				} `json:"kinds"`
			}
			require.NoError(t, json.Unmarshal([]byte(stdout), &got), stdout)
			require.Len(t, got.Kinds, 5, stdout)
			listed := map[string]bool{}
			for _, k := range got.Kinds {
				require.NotEmpty(t, k.Keys, k.Kind)
				for _, key := range k.Keys {
					listed[key] = true
				}
			}
			// Every key Redis has of the name is listed.
			inRedis, err := srv.Do("KEYS", "redisync:*"+name+"*")
			require.NoError(t, err)
			require.NotEmpty(t, inRedis)
			for _, key := range strings.Split(inRedis, "\n") {
				require.True(t, key == "" || listed[key], "%q: key %q not shown; shown: %v", name, key, listed)
			}

			stdout, stderr, code = cli(t, "inspect", name)
			require.Equal(t, 0, code, stderr)
			require.Regexp(t, `(?m)^  keys: +redisync:`, stdout)
			for key := range listed {
				require.Contains(t, stdout, key)
			}
		}
	})

	t.Run("inspect json", func(t *testing.T) {
		t.Parallel()
		c := dialT(t, srv.Addr)
		l := mustLock(t, ctx, c.Mutex("op:json").Lock)
		r := mustLock(t, ctx, c.RWMutex("op:json").RLock)

		// Flags after the name work too.
		stdout, stderr, code := cli(t, "inspect", "op:json", "--json")
		require.Equal(t, 0, code, stderr)
		var got struct {
			Name  string `json:"name"`
			Free  bool   `json:"free"`
			Kinds []struct {
				Kind   string `json:"kind"`
				Holder *struct {
					Owner    string `json:"owner"`
					ClientID string `json:"client_id"`
					Holds    int    `json:"holds"`
					TTLms    int64  `json:"ttl_ms"`
					Token    uint64 `json:"token"`
				} `json:"holder"`
				Readers *int `json:"readers"`
			} `json:"kinds"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &got), stdout)
		require.Equal(t, "op:json", got.Name)
		require.False(t, got.Free)
		require.Len(t, got.Kinds, 2, stdout)
		require.Equal(t, "mutex", got.Kinds[0].Kind)
		require.NotNil(t, got.Kinds[0].Holder)
		require.Equal(t, c.ID(), got.Kinds[0].Holder.ClientID)
		require.Equal(t, l.Token(), got.Kinds[0].Holder.Token)
		require.Equal(t, 1, got.Kinds[0].Holder.Holds)
		require.Positive(t, got.Kinds[0].Holder.TTLms)
		require.Equal(t, "rw", got.Kinds[1].Kind)
		require.NotNil(t, got.Kinds[1].Readers)
		require.Equal(t, 1, *got.Kinds[1].Readers)
		require.NoError(t, r.Unlock(ctx))
	})

	for _, k := range []struct {
		name, title string
		fair        bool
	}{{"op:queued", "mutex", false}, {"op:fair", "fair mutex", true}} {
		t.Run("inspect "+k.title+" with waiters", func(t *testing.T) {
			t.Parallel()
			lock := func(c *redisync.Client, ctx context.Context) (*redisync.Lease, error) {
				if k.fair {
					return c.FairMutex(k.name).Lock(ctx)
				}
				return c.Mutex(k.name).Lock(ctx)
			}
			c := dialT(t, srv.Addr)
			l, err := lock(c, ctx)
			require.NoError(t, err)
			wctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			t.Cleanup(func() { cancel(); wg.Wait() })
			for range 2 {
				w := dialT(t, srv.Addr)
				wg.Go(func() {
					if l, err := lock(w, wctx); err == nil {
						_ = l.Unlock(context.WithoutCancel(wctx))
					}
				})
			}
			require.Eventually(t, func() bool {
				st, err := c.Mutex(k.name).Inspect(ctx)
				if k.fair {
					var fst redisync.FairMutexState
					fst, err = c.FairMutex(k.name).Inspect(ctx)
					st = fst.MutexState
				}
				return err == nil && st.Waiters == 2
			}, 5*time.Second, 10*time.Millisecond)

			stdout, stderr, code := cli(t, "inspect", k.name)
			require.Equal(t, 0, code, stderr)
			require.Contains(t, stdout, k.title+` "`+k.name+`"`)
			require.Regexp(t, `(?m)^  client: +`+c.ID()+`$`, stdout)
			require.Regexp(t, `(?m)^  token: +`+strconv.FormatUint(l.Token(), 10)+`$`, stdout)
			require.Regexp(t, `(?m)^  waiters: +2 in the queue$`, stdout)
		})
	}

	t.Run("inspect rw mutex with two readers", func(t *testing.T) {
		t.Parallel()
		for range 2 {
			mustLock(t, ctx, dialT(t, srv.Addr).RWMutex("op:rw").RLock)
		}
		stdout, stderr, code := cli(t, "inspect", "op:rw")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, `rw mutex "op:rw"`)
		require.Regexp(t, `(?m)^  writer: +none$`, stdout)
		require.Regexp(t, `(?m)^  readers: +2 \(last share ends in [0-9.]+(ms|s)\)$`, stdout)
		require.Regexp(t, `(?m)^  writers waiting: +0$`, stdout)
	})

	t.Run("inspect semaphore and latch", func(t *testing.T) {
		t.Parallel()
		c := dialT(t, srv.Addr)
		sem := c.Semaphore("op:sem")
		_, err := sem.SetSize(ctx, 5)
		require.NoError(t, err)
		_, err = sem.Lock(ctx, 2)
		require.NoError(t, err)
		_, err = c.Latch("op:sem").Reset(ctx, 3)
		require.NoError(t, err)

		stdout, stderr, code := cli(t, "inspect", "op:sem")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, `semaphore "op:sem"`)
		require.Regexp(t, `(?m)^  size: +5$`, stdout)
		require.Regexp(t, `(?m)^  acquired: +2$`, stdout)
		require.Regexp(t, `(?m)^  available: +3$`, stdout)
		require.Regexp(t, `(?m)^  holders: +1$`, stdout)
		require.Regexp(t, `(?m)^ +`+c.ID()+`  2 permits  ttl [0-9.]+(ms|s)$`, stdout)
		require.Contains(t, stdout, `latch "op:sem"`)
		require.Regexp(t, `(?m)^  count: +3 `, stdout)
	})

	t.Run("inspect free", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := cli(t, "inspect", "op:nobody")
		require.Equal(t, 0, code, stderr)
		require.Equal(t, "op:nobody: free (no lock of any kind)\n", stdout)

		stdout, _, code = cli(t, "inspect", "--json", "op:nobody")
		require.Equal(t, 0, code)
		var got map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &got))
		require.Equal(t, true, got["free"])
		require.Equal(t, []any{}, got["kinds"])
	})

	t.Run("inspect with another prefix", func(t *testing.T) {
		t.Parallel()
		c := dialT(t, srv.Addr, redisync.WithPrefix("other"))
		mustLock(t, ctx, c.Mutex("op:prefix").Lock)
		stdout, _, code := cli(t, "inspect", "op:prefix")
		require.Equal(t, 0, code)
		require.Contains(t, stdout, "free")
		stdout, _, code = cli(t, "inspect", "--prefix", "other", "op:prefix")
		require.Equal(t, 0, code)
		require.Regexp(t, `(?m)^  client: +`+c.ID()+`$`, stdout)
	})

	t.Run("REDIS_URL", func(t *testing.T) {
		t.Parallel()
		c := dialT(t, srv.Addr)
		mustLock(t, ctx, c.Mutex("op:url").Lock)
		cmd := exec.Command(bin, "inspect", "op:url")
		cmd.Env = append(demoEnv(), "REDIS_URL=redis://"+srv.Addr+"/0")
		out, err := cmd.Output()
		require.NoError(t, err)
		require.Contains(t, string(out), c.ID())
	})

	t.Run("force unlock makes the holder's Lost fire", func(t *testing.T) {
		t.Parallel()
		c := dialT(t, srv.Addr, redisync.WithWatchdogLease(600*time.Millisecond))
		l := mustLock(t, ctx, c.Mutex("op:force").Lock)

		stdout, stderr, code := cli(t, "unlock", "--force", "--yes", "op:force")
		require.Equal(t, 0, code, stderr)
		require.Empty(t, stderr)
		require.Contains(t, stdout, `force-unlocked mutex "op:force" (was held by `+c.ID()+`, token `+strconv.FormatUint(l.Token(), 10)+`)`)
		select {
		case <-l.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("the lease was not lost 5s after the force-unlock")
		}
		require.ErrorIs(t, l.Err(), redisync.ErrExpired)

		stdout, _, code = cli(t, "inspect", "op:force")
		require.Equal(t, 0, code)
		require.Equal(t, "op:force: free (no lock of any kind)\n", stdout)
	})

	t.Run("force unlock of one kind", func(t *testing.T) {
		t.Parallel()
		c := dialT(t, srv.Addr, redisync.WithWatchdogLease(600*time.Millisecond))
		m := mustLock(t, ctx, c.Mutex("op:kinds").Lock)
		w := mustLock(t, ctx, c.RWMutex("op:kinds").Lock)

		stdout, stderr, code := cli(t, "unlock", "--force", "--yes", "--kind", "rw", "op:kinds")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, `force-unlocked rw mutex "op:kinds" (was write-held by `+c.ID())
		require.NotContains(t, stdout, `force-unlocked mutex`)
		select {
		case <-w.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("the write lease was not lost 5s after the force-unlock")
		}
		require.NoError(t, m.Err(), "the mutex of the same name was not touched")

		// Nothing of that kind, but the mutex is held: said, and a failure.
		stdout, stderr, code = cli(t, "unlock", "--force", "--yes", "--kind", "fair", "op:kinds")
		require.Equal(t, exitFailure, code, stdout)
		require.Contains(t, stderr, "op:kinds: nothing to unlock (no fair mutex held), but the name holds: mutex held by "+c.ID())
		require.NoError(t, m.Unlock(ctx))
	})

	t.Run("unlock needs --yes without a terminal", func(t *testing.T) {
		t.Parallel()
		c := dialT(t, srv.Addr)
		l := mustLock(t, ctx, c.Mutex("op:noyes").Lock)
		stdout, stderr, code := cli(t, "unlock", "--force", "op:noyes") // stdin is /dev/null
		require.Equal(t, 2, code)
		require.Empty(t, stdout)
		require.Equal(t, "redisync unlock: stdin is not a terminal to ask for confirmation on: pass --yes to unlock without asking (run 'redisync unlock -h' for usage)\n", stderr)
		require.NoError(t, l.Err())
		st, err := c.Mutex("op:noyes").Inspect(ctx)
		require.NoError(t, err)
		require.True(t, st.Locked, "still locked")
	})

	t.Run("unlock needs --force", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := cli(t, "unlock", "--yes", "op:x")
		require.Equal(t, 2, code)
		require.Empty(t, stdout)
		require.Contains(t, stderr, "redisync unlock: --force is required")
	})

	t.Run("watch", func(t *testing.T) {
		t.Parallel()
		c := dialT(t, srv.Addr)
		l := mustLock(t, ctx, c.Mutex("op:watch").Lock)
		stdout, stderr, code := cli(t, "watch", "--count", "2", "--interval", "50ms", "op:watch", "op:watch-free")
		require.Equal(t, 0, code, stderr)
		require.Empty(t, stderr)
		require.NotContains(t, stdout, "\x1b[", "no terminal codes on a pipe")
		blocks := regexp.MustCompile(`(?m)^--- \d{4}-\d\d-\d\dT[0-9:.]+(Z|[+-]\d\d:\d\d) ---$`).FindAllStringIndex(stdout, -1)
		require.Len(t, blocks, 2, stdout)
		require.Equal(t, 2, strings.Count(stdout, "NAME"), stdout)
		require.Regexp(t, `(?m)^op:watch +mutex +`+c.ID()+` +1 +[0-9.]+(ms|s) +`+strconv.FormatUint(l.Token(), 10)+` +0$`, stdout)
		require.Regexp(t, `(?m)^op:watch-free +- +free$`, stdout)
	})

	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := runCLI(t, bin, "inspect", "--addr", "127.0.0.1:1", "op:x")
		require.Equal(t, 1, code)
		require.Empty(t, stdout)
		require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		require.Contains(t, stderr, "redisync inspect: connect to Redis at 127.0.0.1:1: ")
	})

	t.Run("bad arguments", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			args []string
			msg  string
		}{
			{[]string{"inspect"}, "missing the lock NAME"},
			{[]string{"inspect", "a", "b"}, `unexpected argument "b" after the lock name "a"`},
			{[]string{"inspect", "--nope", "a"}, "flag provided but not defined: -nope"},
			{[]string{"inspect", "a", "--json=maybe"}, `invalid boolean value "maybe" for -json`},
			{[]string{"inspect", "--prefix", "a{b", "a"}, `--prefix "a{b" must be non-empty`},
			{[]string{"inspect", "--timeout", "0s", "a"}, "--timeout must be positive"},
			{[]string{"inspect", "--redisson", "lock", "a"}, `--redisson must be semaphore, permit-expirable-semaphore or latch, got "lock"`},
			{[]string{"unlock", "--force"}, "missing the lock NAME"},
			{[]string{"unlock", "--force", "--kind", "semaphore", "a"}, `--kind must be mutex, fair, rw, redisson or redisson-rw, got "semaphore"`},
			{[]string{"watch"}, "missing the lock NAME"},
			{[]string{"watch", "--interval", "0s", "a"}, "--interval must be at least 10ms"},
			{[]string{"watch", "--count", "-1", "a"}, "--count must not be negative"},
			{[]string{"watch", "--count", "x", "a"}, `invalid value "x" for flag -count`},
			{[]string{"watch", "--redisson", "rlock", "a"}, `--redisson must be semaphore, permit-expirable-semaphore or latch, got "rlock"`},
		} {
			stdout, stderr, code := runCLI(t, bin, tc.args...)
			require.Equal(t, 2, code, "%q: %s", tc.args, stderr)
			require.Empty(t, stdout, "%q", tc.args)
			require.Equal(t, 1, strings.Count(stderr, "\n"), "%q: one line: %q", tc.args, stderr)
			cmd := tc.args[0]
			require.True(t, strings.HasPrefix(stderr, "redisync "+cmd+": "+tc.msg), "%q: %q", tc.args, stderr)
			require.True(t, strings.HasSuffix(stderr, "(run 'redisync "+cmd+" -h' for usage)\n"), "%q: %q", tc.args, stderr)
		}
	})

	t.Run("help", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{"inspect", "unlock", "watch"} {
			for _, args := range [][]string{{name, "-h"}, {name, "--help"}, {"help", name}, {name, "a", "--help"}} {
				stdout, stderr, code := runCLI(t, bin, args...)
				require.Equal(t, 0, code, "%q", args)
				require.Empty(t, stderr, "%q", args)
				require.Contains(t, stdout, "Usage: redisync "+name+" ", "%q", args)
				for _, f := range []string{"--addr host:port", "--user user", "--password password", "--tls\n", "--tls-insecure", "--prefix prefix", "REDIS_URL"} {
					require.Contains(t, stdout, f, "%q", args)
				}
			}
		}
		stdout, _, _ := runCLI(t, bin, "help")
		for _, name := range []string{"inspect", "unlock", "watch", "demo"} {
			require.Regexp(t, `(?m)^  `+name+` +\S`, stdout)
		}
	})
}

// TestConfirm covers the answers to unlock's question.
func TestConfirm(t *testing.T) {
	for answer, want := range map[string]bool{
		"y\n": true, "Y\n": true, "yes\n": true, " YES \n": true, "y": true,
		"\n": false, "n\n": false, "no\n": false, "": false, "yep\n": false,
	} {
		var out bytes.Buffer
		ok, err := confirm(t.Context(), strings.NewReader(answer), &out, "Force-unlock x? [y/N] ")
		require.NoError(t, err)
		require.Equal(t, want, ok, "%q", answer)
		require.Equal(t, "Force-unlock x? [y/N] ", out.String())
	}

	// An interrupt ends the question.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	pr, pw := io.Pipe()
	defer pw.Close()
	ok, err := confirm(ctx, pr, io.Discard, "? ")
	require.False(t, ok)
	require.ErrorIs(t, err, context.Canceled)
}

// TestParseInterspersed covers flags after arguments.
func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		args []string
		json bool
	}{
		{[]string{"a"}, []string{"a"}, false},
		{[]string{"--json", "a"}, []string{"a"}, true},
		{[]string{"a", "--json"}, []string{"a"}, true},
		{[]string{"a", "--json", "b"}, []string{"a", "b"}, true},
		{[]string{"--", "--json"}, []string{"--json"}, false},
		{[]string{"a", "--", "-b", "--json"}, []string{"a", "-b", "--json"}, false},
		{nil, nil, false},
	} {
		fs := newFlagSet(inspectCommand)
		j := fs.Bool("json", false, "")
		args, err := parseInterspersed(fs, tc.in)
		require.NoError(t, err, "%q", tc.in)
		require.Equal(t, tc.args, args, "%q", tc.in)
		require.Equal(t, tc.json, *j, "%q", tc.in)
	}
}

// dialT returns a Client on addr, closed (releasing what it holds) when
// the test ends.
func dialT(t *testing.T, addr string, opts ...redisync.Option) *redisync.Client {
	t.Helper()
	opts = append([]redisync.Option{redisync.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
	c, err := redisync.Dial(rueidis.ClientOption{InitAddress: []string{addr}}, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// mustLock takes a lease with lock (a handle's Lock or RLock) and fails the
// test if it cannot.
func mustLock(t *testing.T, ctx context.Context, lock func(context.Context) (*redisync.Lease, error)) *redisync.Lease {
	t.Helper()
	l, err := lock(ctx)
	require.NoError(t, err)
	return l
}
