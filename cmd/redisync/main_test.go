package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCLI builds the command once and runs the binary.
func TestCLI(t *testing.T) {
	bin := buildCLI(t)

	t.Run("demo", func(t *testing.T) {
		t.Parallel()
		_, err := exec.LookPath("redis-server")
		require.NoError(t, err, "the demo needs redis-server on PATH: apt-get install redis-server")

		start := time.Now()
		stdout, stderr, code := runCLI(t, bin, "demo", "--workers", "3", "--rounds", "2")
		out := stdout + stderr
		require.Equal(t, 0, code, "demo failed:\n%s", out)
		require.Empty(t, stderr)
		require.Less(t, time.Since(start), 15*time.Second, "the demo is too slow")

		require.Contains(t, stdout, "(a redis-server started for this demo, stopped when it ends)")
		require.Contains(t, stdout, "counter = 6 = 3 workers × 2 rounds: 0 lost updates")
		require.Contains(t, stdout, "fencing tokens strictly increasing over 6 acquisitions")
		require.Regexp(t, `(?m)^ *[0-9.]+ms  worker-[1-3]  acquired  token=[0-9]+  \(waited [0-9.]+ms\)$`, stdout)
		require.Regexp(t, `(?m)^ *[0-9.]+ms  worker-[1-3]  released  counter=[1-6]  \(held [0-9.]+ms\)$`, stdout)
		require.Equal(t, 6+1, strings.Count(stdout, "released"), "6 releases in phase 1, 1 in phase 2")

		// Phase 2: worker-4 has the short lease and loses it.
		require.Regexp(t, `(?m)^ *[0-9.]+ms  operator  unlocked  "demo:orders" by force`, stdout)
		require.Contains(t, stdout, "loss detection on change)", "the holder does not learn of changes to its lock")
		lost := regexp.MustCompile(`(?m)^ *[0-9.]+ms  worker-4  lost      reason: redisync: lock force-unlocked \(ErrForceUnlocked\)  \(detected ([0-9.]+)ms after the force-unlock\)$`).FindStringSubmatch(stdout)
		require.NotNil(t, lost, stdout)
		detected, err := strconv.ParseFloat(lost[1], 64)
		require.NoError(t, err)
		require.Less(t, detected, 1000.0, "the loss was not seen within milliseconds")
		require.Contains(t, stdout, "a fenced write with the old token would be rejected")
		m := regexp.MustCompile(`token ([0-9]+) \(worker-1\) > ([0-9]+) \(worker-4, lost\)`).FindStringSubmatch(stdout)
		require.NotNil(t, m, stdout)
		newTok, err := strconv.ParseUint(m[1], 10, 64)
		require.NoError(t, err)
		oldTok, err := strconv.ParseUint(m[2], 10, 64)
		require.NoError(t, err)
		require.Greater(t, newTok, oldTok)

		require.Contains(t, stdout, "acquisitions  8")
		require.Contains(t, stdout, "lost leases   1")
		require.Contains(t, stdout, "total time")
	})

	t.Run("unknown command", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := runCLI(t, bin, "bogus")
		require.Equal(t, 2, code)
		require.Empty(t, stdout)
		require.Equal(t, "redisync: unknown command \"bogus\" (run 'redisync help' for usage)\n", stderr)
	})

	t.Run("bad flag value", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := runCLI(t, bin, "demo", "--workers", "x")
		require.Equal(t, 2, code)
		require.Empty(t, stdout)
		require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		require.Contains(t, stderr, `redisync demo: invalid value "x" for flag -workers`)
	})

	t.Run("bad arguments", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"demo", "--workers", "0"},
			{"demo", "--rounds", "-1"},
			{"demo", "--nope"},
			{"demo", "extra"},
			{"--addr", "localhost:6379"},
			{"help", "bogus"},
			{},
		} {
			stdout, stderr, code := runCLI(t, bin, args...)
			require.Equal(t, 2, code, "%q", args)
			require.Empty(t, stdout, "%q", args)
			require.NotEmpty(t, stderr, "%q", args)
			if len(args) > 0 {
				require.Equal(t, 1, strings.Count(stderr, "\n"), "%q: one line: %q", args, stderr)
			}
		}
	})

	t.Run("help", func(t *testing.T) {
		t.Parallel()
		for _, arg := range []string{"help", "-h", "--help"} {
			stdout, stderr, code := runCLI(t, bin, arg)
			require.Equal(t, 0, code, arg)
			require.Empty(t, stderr, arg)
			require.Contains(t, stdout, "Usage:\n  redisync <command> [flags]", arg)
			require.Regexp(t, `(?m)^  demo +\S`, stdout, arg)
		}
		for _, args := range [][]string{{"demo", "-h"}, {"demo", "--help"}, {"help", "demo"}} {
			stdout, stderr, code := runCLI(t, bin, args...)
			require.Equal(t, 0, code, "%q", args)
			require.Empty(t, stderr, "%q", args)
			require.Contains(t, stdout, "Usage: redisync demo [--addr host:port] [--workers N] [--rounds N]", "%q", args)
			require.Contains(t, stdout, "--workers N", "%q", args)
			require.Contains(t, stdout, "(default 4)", "%q", args)
		}
	})

	t.Run("no redis-server", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command(bin, "demo")
		cmd.Env = append(demoEnv(), "PATH="+t.TempDir())
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exitErr *exec.ExitError
		require.ErrorAs(t, err, &exitErr)
		require.Equal(t, 1, exitErr.ExitCode())
		require.Equal(t, "redisync demo: redis-server not found in PATH: run `make test` (it installs redis-server and redis-tools with apt-get) or `apt-get install redis-server redis-tools`\n", stderr.String())
	})
}

// buildCLI builds the command into a temporary directory, with the race
// detector when the test binary has it.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "redisync")
	args := []string{"build", "-o", bin}
	if raceEnabled() {
		args = append(args, "-race")
	}
	// go test puts the go command that runs it first on PATH.
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)
	return bin
}

func raceEnabled() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// runCLI runs the binary and returns its output and exit status.
func runCLI(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = demoEnv()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	default:
		require.NoError(t, err, "run %s %q", bin, args)
	}
	return o.String(), e.String(), code
}

// demoEnv is the environment without REDIS_URL, so that the demo starts a
// redis-server of its own. A binary built with the race detector is told
// not to wait a second before exiting (GORACE's atexit_sleep_ms).
func demoEnv() []string {
	var env []string
	gorace := "atexit_sleep_ms=0"
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "REDIS_URL="):
		case strings.HasPrefix(kv, "GORACE="):
			gorace = strings.TrimPrefix(kv, "GORACE=") + " " + gorace
		default:
			env = append(env, kv)
		}
	}
	return append(env, "GORACE="+gorace)
}
