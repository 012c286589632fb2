package redisync

import (
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redisync/redisync/internal/testenv"
)

// The checks that nothing is left behind: no goroutine once the tests are
// done (goleak.VerifyTestMain) or once a test closed its Clients
// (leakCheck), no subscription, and no key but fencing counters.

func TestMain(m *testing.M) {
	if cfg := os.Getenv(workerEnv); cfg != "" {
		os.Exit(runWorker(cfg))
	}
	testenv.Main(m, func() {
		// The Client the examples share.
		exampleMu.Lock()
		defer exampleMu.Unlock()
		if exampleClient != nil {
			exampleClient.Close()
		}
	})
}

// rueidisLingering are goroutines closed rueidis clients leave for a while.
var rueidisLingering = testenv.RueidisLingering

// leftOver returns the keys matching pattern on s that are not fencing
// counters.
var leftOver = testenv.LeftOver

// awaitChannels waits, at most within, until exactly n channels of the env
// have subscribers.
func (e *env) awaitChannels(t testing.TB, n int, within time.Duration, msg string) {
	t.Helper()
	e.te().AwaitChannels(t, n, within, msg)
}

// requireNoSubscriptions waits until no Client subscribes to any channel of
// the env.
func (e *env) requireNoSubscriptions(t testing.TB) {
	t.Helper()
	e.te().RequireNoSubscriptions(t)
}

// requireOnlyFences waits until the keys under prefix are fencing counters
// only: nothing held, nobody queued.
func (e *env) requireOnlyFences(t testing.TB, prefix string) {
	t.Helper()
	e.te().RequireOnlyFences(t, prefix)
}

// requireNothingLeft waits until nothing of the locks under prefix is left
// in the env but their fencing counters, and nobody subscribes.
func (e *env) requireNothingLeft(t testing.TB, prefix string) {
	t.Helper()
	e.te().RequireNothingLeft(t, prefix)
}

// leakCheck notes the goroutines running now. The function it returns
// closes clients and checks that no goroutine started since is left (but
// those that closed rueidis clients leave for a while, and extra).
func leakCheck(t *testing.T) func(clients []*Client, extra ...goleak.Option) {
	return testenv.LeakCheck[*Client](t)
}

// restartedServer is the goroutine that waits for a redis-server restarted
// by the test.
var restartedServer = testenv.RestartedServer
