package redisync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync/internal/testenv"
)

// replyFaults is a rueidis.Client that lets a command run in Redis and
// then holds its reply back, or loses it (see testenv.ReplyFaults), with
// its methods as the tests of this package name them.
type replyFaults struct{ *testenv.ReplyFaults }

// replyRule is one fault of a replyFaults.
type replyRule = testenv.Rule

// errReplyLost is what a caller is told when its reply was lost after its
// command ran: the connection broke under it.
var errReplyLost = testenv.ErrReplyLost

// withReplyFaults wraps rc; the rules are added later.
func withReplyFaults(rc rueidis.Client) *replyFaults {
	return &replyFaults{testenv.WithReplyFaults(rc)}
}

// hold holds the replies of the next times matching calls back for d.
func (rf *replyFaults) hold(match func([]string) bool, times int, d time.Duration) *replyRule {
	return rf.Hold(match, times, d)
}

// lose loses the replies of the next times matching calls, after d.
func (rf *replyFaults) lose(match func([]string) bool, times int, d time.Duration) *replyRule {
	return rf.Lose(match, times, d)
}

// refuse refuses the next times matching calls: they do not run, and the
// callers get an error at once.
func (rf *replyFaults) refuse(match func([]string) bool, times int) *replyRule {
	return rf.Refuse(match, times)
}

// watch calls replied with the caller's context as the reply of each
// matching call is handed back, at once.
func (rf *replyFaults) watch(match func([]string) bool, replied func(ctx context.Context)) *replyRule {
	return rf.Watch(match, replied)
}

// gate holds the replies of the next times matching calls until open is
// called; lost, when lose, instead of delivered then.
func (rf *replyFaults) gate(match func([]string) bool, times int, lose bool) (r *replyRule, open func()) {
	return rf.Gate(match, times, lose)
}

// clear removes every rule and ends every hold.
func (rf *replyFaults) clear() { rf.Clear() }

// drop removes rule r without ending the holds it began.
func (rf *replyFaults) drop(r *replyRule) { rf.Drop(r) }

// faultyClient returns a Client made with New over the env's rueidis
// client wrapped in replyFaults, with LossDetection DetectOnChange, and the
// wrapper; closed at the end of the test.
func (e *env) faultyClient(t testing.TB, opts ...Option) (*Client, *replyFaults) {
	t.Helper()
	return e.faultyClientDetecting(t, true, opts...)
}

// faultyClientDetecting is faultyClient, with LossDetection DetectOnRenewal
// when detect is false (New without DetectChanges).
func (e *env) faultyClientDetecting(t testing.TB, detect bool, opts ...Option) (*Client, *replyFaults) {
	t.Helper()
	return faultyClientOf(t, e.addrs, detect, opts...)
}

// faultyClientOf is faultyClientDetecting for the server at addrs.
func faultyClientOf(t testing.TB, addrs []string, detect bool, opts ...Option) (*Client, *replyFaults) {
	t.Helper()
	opt := rueidis.ClientOption{InitAddress: addrs}
	base := []Option{WithLogger(quietLogger())}
	if detect {
		base = append(base, DetectChanges(&opt))
	}
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("connecting to redis at %v: %v", addrs, err)
	}
	rf := withReplyFaults(rc)
	c, err := New(rf, append(base, opts...)...)
	if err != nil {
		rc.Close()
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		rf.clear()
		c.Close()
		rc.Close()
	})
	return c, rf
}

// runs matches the calls of script s (EVALSHA or EVAL).
func runs(s script) func(cmd []string) bool { return testenv.Runs(s.sha, s.src) }

// runsWith matches the calls of script s one of whose keys or arguments is
// arg.
func runsWith(s script, arg string) func(cmd []string) bool { return testenv.RunsWith(runs(s), arg) }

// TestReplyFaults checks the wrapper itself: a release whose reply is held
// back has freed the lock before its Unlock returns, a lost reply is an
// error to its caller while the script ran, and the calls around a rule
// pass through.
func TestReplyFaults(t *testing.T) {
	eachEnv(t, func(t *testing.T, e *env) {
		c, rf := e.faultyClient(t)
		ctx := context.Background()
		m := c.Mutex(t.Name())

		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, open := rf.gate(runs(releaseScript), 1, false)
		done := make(chan error, 1)
		go func() { done <- l.Unlock(ctx) }()
		<-r.Ran()
		requireFree(t, m)
		select {
		case err := <-done:
			t.Fatalf("Unlock returned %v while its reply was held back", err)
		case <-time.After(50 * time.Millisecond):
		}
		open()
		if err := <-done; err != nil {
			t.Fatalf("Unlock after its reply came: %v", err)
		}

		l, err = m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r = rf.lose(runs(releaseScript), 1, 0)
		if err := l.Unlock(ctx); !errors.Is(err, errReplyLost) {
			t.Fatalf("Unlock with its reply lost: %v, want errReplyLost", err)
		}
		if r.Hits() != 1 {
			t.Fatalf("the rule acted on %d calls, want 1", r.Hits())
		}
		requireFree(t, m)
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock retried after its reply was lost: %v", err)
		}

		ctx2, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		rf.hold(runs(acquireScript), 1, time.Hour)
		if _, err := m.Lock(ctx2); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock whose reply is held back past its ctx: %v", err)
		}
	})
}

// scriptArgs returns the arguments (ARGV) of an EVALSHA or EVAL command, or
// nil for another command.
var scriptArgs = testenv.ScriptArgs

// replyCalls are the kinds of call callMatcher tells apart.
var replyCalls = []string{"acquire", "re-entry", "claim", "release", "keep", "renew", "group"}

// callMatcher matches the calls of one kind of a Mutex or FairMutex (and a
// Group): "acquire" (an acquisition by an owner that holds nothing),
// "re-entry" (by an owner live says holds the lock), "claim" (a waiter
// claiming the lock a release handed over to it), "release", "keep" (a
// release that keeps the lock for local passes), "renew" (the watchdog's
// renewals and a late grant's confirmation) and "group" (a Group's
// acquisition).
func callMatcher(kind string, live func(owner string) bool) func(cmd []string) bool {
	acquire, fair := runs(acquireScript), runs(fairAcquireScript)
	release, renew, group := runs(releaseScript), runs(renewScript), runs(groupAcquireScript)
	return func(cmd []string) bool {
		args := scriptArgs(cmd)
		switch kind {
		case "acquire", "re-entry", "claim":
			if !(acquire(cmd) || fair(cmd)) || len(args) < 6 {
				return false
			}
			switch kind {
			case "claim":
				return args[5] == "queued"
			case "re-entry":
				return args[5] != "queued" && live(args[0])
			}
			return args[5] != "queued" && !live(args[0])
		case "release":
			return release(cmd) && len(args) < 5
		case "keep":
			return release(cmd) && len(args) >= 5
		case "renew":
			return renew(cmd)
		case "group":
			return group(cmd)
		}
		return false
	}
}
