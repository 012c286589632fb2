package redisson

import (
	"sync"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/internal/testenv"
)

// exampleClient is the redisync Client the examples share: connected by
// the first that asks for it, closed by TestMain.
var (
	exampleMu     sync.Mutex
	exampleClient *redisync.Client
)

// ClientForExamples gives the examples, in package redisson_test, a
// redisync Client connected to the test Redis server.
func ClientForExamples() *redisync.Client {
	addr := testenv.SharedAddr()
	exampleMu.Lock()
	defer exampleMu.Unlock()
	if exampleClient == nil {
		c, err := redisync.Dial(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			panic("connecting the examples' Client: " + err.Error())
		}
		exampleClient = c
	}
	return exampleClient
}

// closeExampleClient closes the examples' Client, after the last test.
func closeExampleClient() {
	exampleMu.Lock()
	defer exampleMu.Unlock()
	if exampleClient != nil {
		exampleClient.Close()
	}
}
