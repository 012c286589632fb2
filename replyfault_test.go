package redisync

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// replyFaults is a rueidis.Client for tests that lets a command run in
// Redis and then holds its reply back, or loses it: what a connection that
// stalls or breaks after a write does to one call, without touching the
// calls around it. The command always runs (with the caller's values but
// not its cancellation); only what the caller is told changes. Dedicated
// connections (WAIT after a script, see execAndWait) pass through
// untouched.
type replyFaults struct {
	rueidis.Client

	mu    sync.Mutex
	rules []*replyRule
}

// errReplyLost is what a caller is told when its reply was lost after its
// command ran: the connection broke under it.
var errReplyLost = errors.New("replyfault: the reply was lost after the command ran")

// replyRule is one fault: it acts on the calls whose command match takes.
type replyRule struct {
	match func(cmd []string) bool
	times int           // the matching calls it still acts on; < 0: every one
	delay time.Duration // how long the reply is held back, when not gated
	gated bool          // the reply is held until the gate opens
	lose  bool          // the caller is told errReplyLost once the hold is over
	// replied, when set, is called with the caller's context as each reply
	// the rule acted on is handed back (not for a lost one).
	replied func(ctx context.Context)
	gate    chan struct{} // closed by open or clear: every hold ends

	mu   sync.Mutex
	ran  chan struct{} // closed once a call it acted on ran in Redis
	hits int
}

// withReplyFaults wraps rc; the rules are added later.
func withReplyFaults(rc rueidis.Client) *replyFaults { return &replyFaults{Client: rc} }

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
	opt := rueidis.ClientOption{InitAddress: e.addrs}
	base := []Option{WithLogger(quietLogger())}
	if detect {
		base = append(base, DetectChanges(&opt))
	}
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("connecting to %s redis at %v: %v", e.name, e.addrs, err)
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
func runs(s script) func(cmd []string) bool {
	return func(cmd []string) bool {
		return len(cmd) > 1 && (cmd[0] == "EVALSHA" && cmd[1] == s.sha || cmd[0] == "EVAL" && cmd[1] == s.src)
	}
}

// runsWith matches the calls of script s one of whose keys or arguments is
// arg.
func runsWith(s script, arg string) func(cmd []string) bool {
	m := runs(s)
	return func(cmd []string) bool {
		if !m(cmd) {
			return false
		}
		for _, a := range cmd[2:] {
			if a == arg {
				return true
			}
		}
		return false
	}
}

// add adds a rule acting on the next times matching calls (every one when
// times < 0).
func (rf *replyFaults) add(r *replyRule) *replyRule {
	r.ran, r.gate = make(chan struct{}), make(chan struct{})
	rf.mu.Lock()
	rf.rules = append(rf.rules, r)
	rf.mu.Unlock()
	return r
}

// hold holds the replies of the next times matching calls back for d.
func (rf *replyFaults) hold(match func([]string) bool, times int, d time.Duration) *replyRule {
	return rf.add(&replyRule{match: match, times: times, delay: d})
}

// lose loses the replies of the next times matching calls, after d.
func (rf *replyFaults) lose(match func([]string) bool, times int, d time.Duration) *replyRule {
	return rf.add(&replyRule{match: match, times: times, delay: d, lose: true})
}

// watch calls replied with the caller's context as the reply of each
// matching call is handed back, at once.
func (rf *replyFaults) watch(match func([]string) bool, replied func(ctx context.Context)) *replyRule {
	return rf.add(&replyRule{match: match, times: -1, replied: replied})
}

// gate holds the replies of the next times matching calls until open is
// called; lost, when lose, instead of delivered then.
func (rf *replyFaults) gate(match func([]string) bool, times int, lose bool) (r *replyRule, open func()) {
	r = rf.add(&replyRule{match: match, times: times, lose: lose, gated: true})
	return r, r.open
}

// clear removes every rule and ends every hold.
func (rf *replyFaults) clear() {
	rf.mu.Lock()
	rules := rf.rules
	rf.rules = nil
	rf.mu.Unlock()
	for _, r := range rules {
		r.open()
	}
}

// open ends the rule's holds, now and to come.
func (r *replyRule) open() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.gate:
	default:
		close(r.gate)
	}
}

// Ran is closed once a call the rule acted on ran in Redis.
func (r *replyRule) Ran() <-chan struct{} { return r.ran }

// Hits is the number of calls the rule acted on.
func (r *replyRule) Hits() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hits
}

// take returns the rule that acts on cmd, counting the call, or nil.
func (rf *replyFaults) take(cmd []string) *replyRule {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	for _, r := range rf.rules {
		if r.times != 0 && r.match(cmd) {
			if r.times > 0 {
				r.times--
			}
			r.mu.Lock()
			r.hits++
			r.mu.Unlock()
			return r
		}
	}
	return nil
}

// refund gives back the count of a call the rule did not act on after
// all.
func (rf *replyFaults) refund(r *replyRule) {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	if r.times >= 0 {
		r.times++
	}
	r.mu.Lock()
	r.hits--
	r.mu.Unlock()
}

// after holds a reply as r says, then returns it, or what the caller is
// told instead.
func (rf *replyFaults) after(ctx context.Context, r *replyRule, res rueidis.RedisResult) rueidis.RedisResult {
	if re, ok := rueidis.IsRedisErr(res.Error()); ok && re.IsNoScript() {
		rf.refund(r) // the script did not run: the EVAL that follows will
		return res
	}
	r.mu.Lock()
	select {
	case <-r.ran:
	default:
		close(r.ran)
	}
	r.mu.Unlock()
	var wait <-chan time.Time
	if !r.gated {
		t := time.NewTimer(r.delay)
		defer t.Stop()
		wait = t.C
	}
	select {
	case <-wait:
	case <-r.gate:
	case <-ctx.Done():
		return rueidis.NewErrorResult(ctx.Err())
	}
	if r.lose {
		return rueidis.NewErrorResult(errReplyLost)
	}
	if r.replied != nil {
		r.replied(ctx)
	}
	return res
}

func (rf *replyFaults) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	r := rf.take(cmd.Commands())
	if r == nil {
		return rf.Client.Do(ctx, cmd)
	}
	return rf.after(ctx, r, rf.Client.Do(context.WithoutCancel(ctx), cmd))
}

func (rf *replyFaults) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	rules := make([]*replyRule, len(cmds))
	some := false
	for i, cmd := range cmds {
		rules[i] = rf.take(cmd.Commands())
		some = some || rules[i] != nil
	}
	if !some {
		return rf.Client.DoMulti(ctx, cmds...)
	}
	res := rf.Client.DoMulti(context.WithoutCancel(ctx), cmds...)
	var wg sync.WaitGroup
	for i, r := range rules {
		if r != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i] = rf.after(ctx, r, res[i])
			}()
		}
	}
	wg.Wait()
	return res
}

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

// drop removes rule r without ending the holds it began: the calls it
// already acted on keep their fault, later calls pass through.
func (rf *replyFaults) drop(r *replyRule) {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	rf.rules = slices.DeleteFunc(rf.rules, func(o *replyRule) bool { return o == r })
}

// scriptArgs returns the arguments (ARGV) of an EVALSHA or EVAL command, or
// nil for another command.
func scriptArgs(cmd []string) []string {
	if len(cmd) < 3 || (cmd[0] != "EVALSHA" && cmd[0] != "EVAL") {
		return nil
	}
	n, err := strconv.Atoi(cmd[2])
	if err != nil || 3+n > len(cmd) {
		return nil
	}
	return cmd[3+n:]
}

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
