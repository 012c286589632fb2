package testenv

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// ReplyFaults is a rueidis.Client for tests that lets a command run in
// Redis and then holds its reply back, or loses it: what a connection that
// stalls or breaks after a write does to one call, without touching the
// calls around it. The command always runs (with the caller's values but
// not its cancellation); only what the caller is told changes. Dedicated
// connections (WAIT after a script) pass through untouched.
type ReplyFaults struct {
	rueidis.Client

	mu    sync.Mutex
	rules []*Rule
}

// ErrReplyLost is what a caller is told when its reply was lost after its
// command ran: the connection broke under it.
var ErrReplyLost = errors.New("replyfault: the reply was lost after the command ran")

// ErrRefused is what a caller is told when its command was refused before
// it was sent: it did not run.
var ErrRefused = errors.New("replyfault: the command was refused before it was sent")

// Rule is one fault: it acts on the calls whose command match takes.
type Rule struct {
	match func(cmd []string) bool
	times int           // the matching calls it still acts on; < 0: every one
	delay time.Duration // how long the reply is held back, when not gated
	gated bool          // the reply is held until the gate opens
	lose  bool          // the caller is told ErrReplyLost once the hold is over
	// refuse: the command is not sent at all, and the caller is told
	// ErrRefused at once (a connection that breaks before the write).
	refuse bool
	// replied, when set, is called with the caller's context as each reply
	// the rule acted on is handed back (not for a lost one).
	replied func(ctx context.Context)
	gate    chan struct{} // closed by Open or Clear: every hold ends

	mu   sync.Mutex
	ran  chan struct{} // closed once a call it acted on ran in Redis
	hits int
}

// WithReplyFaults wraps rc; the rules are added later.
func WithReplyFaults(rc rueidis.Client) *ReplyFaults { return &ReplyFaults{Client: rc} }

// Runs matches the calls of the script whose SHA-1 is sha and source src
// (EVALSHA or EVAL).
func Runs(sha, src string) func(cmd []string) bool {
	return func(cmd []string) bool {
		return len(cmd) > 1 && (cmd[0] == "EVALSHA" && cmd[1] == sha || cmd[0] == "EVAL" && cmd[1] == src)
	}
}

// RunsWith matches the calls that m matches one of whose keys or
// arguments is arg.
func RunsWith(m func(cmd []string) bool, arg string) func(cmd []string) bool {
	return func(cmd []string) bool {
		if !m(cmd) {
			return false
		}
		return slices.Contains(cmd[2:], arg)
	}
}

// ScriptArgs returns the arguments (ARGV) of an EVALSHA or EVAL command,
// or nil for another command.
func ScriptArgs(cmd []string) []string {
	if len(cmd) < 3 || (cmd[0] != "EVALSHA" && cmd[0] != "EVAL") {
		return nil
	}
	n, err := strconv.Atoi(cmd[2])
	if err != nil || 3+n > len(cmd) {
		return nil
	}
	return cmd[3+n:]
}

// add adds a rule acting on the next times matching calls (every one when
// times < 0).
func (rf *ReplyFaults) add(r *Rule) *Rule {
	r.ran, r.gate = make(chan struct{}), make(chan struct{})
	rf.mu.Lock()
	rf.rules = append(rf.rules, r)
	rf.mu.Unlock()
	return r
}

// Hold holds the replies of the next times matching calls (every one when
// times < 0) back for d; a caller whose ctx ends first gets ctx.Err().
func (rf *ReplyFaults) Hold(match func([]string) bool, times int, d time.Duration) *Rule {
	return rf.add(&Rule{match: match, times: times, delay: d})
}

// Lose loses the replies of the next times matching calls, after d: the
// callers get ErrReplyLost.
func (rf *ReplyFaults) Lose(match func([]string) bool, times int, d time.Duration) *Rule {
	return rf.add(&Rule{match: match, times: times, delay: d, lose: true})
}

// Refuse refuses the next times matching calls (every one when times < 0):
// they are not sent, and the callers get ErrRefused. Ran stays open.
func (rf *ReplyFaults) Refuse(match func([]string) bool, times int) *Rule {
	return rf.add(&Rule{match: match, times: times, refuse: true})
}

// Watch calls replied with the caller's context as the reply of each
// matching call is handed back, at once.
func (rf *ReplyFaults) Watch(match func([]string) bool, replied func(ctx context.Context)) *Rule {
	return rf.add(&Rule{match: match, times: -1, replied: replied})
}

// Observe calls see with the words of every command sent through the
// wrapper from now on, under the wrapper's lock (see must not call into the
// wrapper), before the rules added after it are matched; it acts on no
// call.
func (rf *ReplyFaults) Observe(see func(cmd []string)) *Rule {
	return rf.add(&Rule{times: -1, match: func(cmd []string) bool {
		see(cmd)
		return false
	}})
}

// Gate holds the replies of the next times matching calls until open is
// called; lost, when lose, instead of delivered then.
func (rf *ReplyFaults) Gate(match func([]string) bool, times int, lose bool) (r *Rule, open func()) {
	r = rf.add(&Rule{match: match, times: times, lose: lose, gated: true})
	return r, r.Open
}

// Clear removes every rule and ends every hold.
func (rf *ReplyFaults) Clear() {
	rf.mu.Lock()
	rules := rf.rules
	rf.rules = nil
	rf.mu.Unlock()
	for _, r := range rules {
		r.Open()
	}
}

// Drop removes rule r without ending the holds it began: the calls it
// already acted on keep their fault, later calls pass through.
func (rf *ReplyFaults) Drop(r *Rule) {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	rf.rules = slices.DeleteFunc(rf.rules, func(o *Rule) bool { return o == r })
}

// Open ends the rule's holds, now and to come.
func (r *Rule) Open() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.gate:
	default:
		close(r.gate)
	}
}

// Ran is closed once a call the rule acted on ran in Redis.
func (r *Rule) Ran() <-chan struct{} { return r.ran }

// Hits is the number of calls the rule acted on.
func (r *Rule) Hits() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hits
}

// take returns the rule that acts on cmd, counting the call, or nil.
func (rf *ReplyFaults) take(cmd []string) *Rule {
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
func (rf *ReplyFaults) refund(r *Rule) {
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
func (rf *ReplyFaults) after(ctx context.Context, r *Rule, res rueidis.RedisResult) rueidis.RedisResult {
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
		return rueidis.NewErrorResult(ErrReplyLost)
	}
	if r.replied != nil {
		r.replied(ctx)
	}
	return res
}

// Do runs cmd, and holds back or loses its reply as the first rule that
// matches it says.
func (rf *ReplyFaults) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	r := rf.take(cmd.Commands())
	if r == nil {
		return rf.Client.Do(ctx, cmd)
	}
	if r.refuse {
		return rueidis.NewErrorResult(ErrRefused)
	}
	return rf.after(ctx, r, rf.Client.Do(context.WithoutCancel(ctx), cmd))
}

// DoMulti runs cmds, and holds back or loses the reply of each as the
// first rule that matches it says.
func (rf *ReplyFaults) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	words := make([][]string, len(cmds))
	for i, cmd := range cmds {
		words[i] = cmd.Commands()
	}
	return rf.multi(ctx, words, func(ctx context.Context, sent []int) []rueidis.RedisResult {
		batch := make([]rueidis.Completed, len(sent))
		for i, j := range sent {
			batch[i] = cmds[j]
		}
		return rf.Client.DoMulti(ctx, batch...)
	})
}

// DoMultiCache runs the client-side cached reads multi, and holds back or
// loses the reply of each as the first rule that matches it says, as
// DoMulti does (a read rueidis answers from its cache counts as ran).
func (rf *ReplyFaults) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	words := make([][]string, len(multi))
	for i, ct := range multi {
		words[i] = ct.Cmd.Commands()
	}
	return rf.multi(ctx, words, func(ctx context.Context, sent []int) []rueidis.RedisResult {
		batch := make([]rueidis.CacheableTTL, len(sent))
		for i, j := range sent {
			batch[i] = multi[j]
		}
		return rf.Client.DoMultiCache(ctx, batch...)
	})
}

// multi runs a batch of commands whose words are cmds (run, with the
// indexes of the commands to send, in order: those no rule refuses), and
// holds back or loses the reply of each as the first rule that matches it
// says.
func (rf *ReplyFaults) multi(ctx context.Context, cmds [][]string, run func(ctx context.Context, sent []int) []rueidis.RedisResult) []rueidis.RedisResult {
	rules := make([]*Rule, len(cmds))
	some := false
	sent := make([]int, 0, len(cmds))
	for i, cmd := range cmds {
		rules[i] = rf.take(cmd)
		some = some || rules[i] != nil
		if rules[i] == nil || !rules[i].refuse {
			sent = append(sent, i)
		}
	}
	if !some {
		return run(ctx, sent)
	}
	res := make([]rueidis.RedisResult, len(cmds))
	if len(sent) > 0 {
		for k, r := range run(context.WithoutCancel(ctx), sent) {
			res[sent[k]] = r
		}
	}
	var wg sync.WaitGroup
	for i, r := range rules {
		switch {
		case r == nil:
		case r.refuse:
			res[i] = rueidis.NewErrorResult(ErrRefused)
		default:
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
