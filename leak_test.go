package redisync

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redisync/redisync/internal/redistest"
)

// The checks that nothing is left behind: no goroutine once the tests are
// done (goleak.VerifyTestMain) or once a test closed its Clients
// (leakCheck), no subscription, and no key but fencing counters.

func TestMain(m *testing.M) {
	if cfg := os.Getenv(workerEnv); cfg != "" {
		os.Exit(runWorker(cfg))
	}
	goleak.VerifyTestMain(stopShared{m}, rueidisLingering...)
}

// stopShared runs the tests, then closes the Client the examples share and
// stops the servers the tests share, so that goleak finds none of their
// goroutines.
type stopShared struct{ m *testing.M }

func (s stopShared) Run() int {
	code := s.m.Run()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if exampleClient != nil {
		exampleClient.Close()
	}
	if sharedServer != nil {
		sharedServer.Stop()
	}
	if sharedCluster != nil {
		sharedCluster.Stop()
	}
	return code
}

// rueidisLingering are goroutines a closed rueidis cluster client leaves
// behind for a few seconds: the delayed close of the connections a topology
// refresh dropped, and a delayed refresh.
var rueidisLingering = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
	goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
}

// awaitChannels waits, at most within, until exactly n channels of the env
// have subscribers. A failure reports msg and the channels last seen.
func (e *env) awaitChannels(t testing.TB, n int, within time.Duration, msg string) {
	t.Helper()
	var last []string
	eventually(t, within, func() bool {
		last = e.channels(t)
		return len(last) == n
	}, "%s; channels: %v", msg, &last)
}

// requireNoSubscriptions waits until no Client subscribes to any channel of
// the env.
func (e *env) requireNoSubscriptions(t testing.TB) {
	t.Helper()
	e.awaitChannels(t, 0, 10*time.Second, "subscriptions left")
}

// requireOnlyFences waits until the keys under prefix ("redisync:" for the
// default prefix) are fencing counters only (see leftOverScript): nothing
// held, nobody queued.
func (e *env) requireOnlyFences(t testing.TB, prefix string) {
	t.Helper()
	var left []string
	eventually(t, 10*time.Second, func() bool {
		left = nil
		for _, s := range e.masters() {
			left = append(left, leftOver(t, s, prefix+"*")...)
		}
		return len(left) == 0
	}, "keys left: %q", &left)
}

// leftOverScript lists the keys matching ARGV[1] that are not fencing
// counters. A fencing counter is a hash without an owner (or with an empty
// one) that expires and holds a token ('token': a free Mutex or FairMutex;
// 't' or 'r': an RWMutex's fence hash).
const leftOverScript = `
local out = {}
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
  local fence = redis.call('TYPE', k).ok == 'hash' and (redis.call('HGET', k, 'owner') or '') == ''
    and redis.call('PTTL', k) > 0
    and (redis.call('HEXISTS', k, 'token') + redis.call('HEXISTS', k, 't') + redis.call('HEXISTS', k, 'r')) > 0
  if not fence then
    out[#out + 1] = k
  end
end
return out`

// leftOver returns the keys matching pattern on s that are not fencing
// counters (leftOverScript), in one call.
func leftOver(t testing.TB, s *redistest.Server, pattern string) []string {
	t.Helper()
	return lines(t, s, "EVAL", leftOverScript, "0", pattern)
}

// requireNothingLeft waits until nothing of the locks under prefix is left
// in the env but their fencing counters, and nobody subscribes.
func (e *env) requireNothingLeft(t testing.TB, prefix string) {
	t.Helper()
	e.requireOnlyFences(t, prefix)
	e.requireNoSubscriptions(t)
}

// leakCheck notes the goroutines running now. The function it returns
// closes clients and checks that no goroutine started since is left (but
// those that closed rueidis clients leave for a while, and extra).
func leakCheck(t *testing.T) func(clients []*Client, extra ...goleak.Option) {
	ignore := goleak.IgnoreCurrent()
	return func(clients []*Client, extra ...goleak.Option) {
		t.Helper()
		for _, c := range clients {
			require.NoError(t, c.Close())
		}
		goleak.VerifyNone(t, append(append(rueidisLingering, ignore), extra...)...)
	}
}

// restartedServer is the goroutine that waits for a redis-server restarted
// by the test.
var restartedServer = goleak.IgnoreAnyFunction("github.com/redisync/redisync/internal/redistest.(*Server).start.func1")
