package redisson

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redisync/redisync/internal/redistest"
	"github.com/redisync/redisync/internal/testenv"
)

// BenchmarkRedissonPubSubRelease measures a Lock and its Unlock (which
// publishes one message) per publishing mode, on standalone and on the
// 3-master Cluster: the time per op, and the servers' CPU per op (user and
// system, over every node: a classic PUBLISH on a Cluster reaches every
// node over the cluster bus). The difference between "sharded" or
// "classic" and "both" is what publishing both ways costs a release.
func BenchmarkRedissonPubSubRelease(b *testing.B) {
	for _, e := range []*env{wrapEnv(testenv.Standalone(b)), wrapEnv(testenv.Cluster(b))} {
		modes := []struct {
			name string
			m    PubSub
		}{{"classic", PubSubClassic}, {"sharded", PubSubSharded}, {"both", PubSubBoth}}
		for _, m := range modes {
			b.Run(e.Name+"/"+m.name, func(b *testing.B) {
				ctx := context.Background()
				l := e.client(b).Lock("bench-pubsub-"+m.name, WithPubSub(m.m))
				nodes := e.Masters()
				if e.Cluster != nil {
					nodes = append(nodes, e.Cluster.Replicas...)
				}
				cpu0 := serversCPU(b, nodes)
				b.ResetTimer()
				for range b.N {
					ls, err := l.Lock(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if err := ls.Unlock(ctx); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric((serversCPU(b, nodes)-cpu0)*1e6/float64(b.N), "server-cpu-µs/op")
			})
		}
	}
}

// serversCPU sums the CPU (user and system, in seconds) the servers used.
func serversCPU(b *testing.B, nodes []*redistest.Server) float64 {
	var sum float64
	for _, s := range nodes {
		out, err := s.Do("INFO", "cpu")
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range strings.Split(out, "\n") {
			l = strings.TrimSpace(l)
			for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
				if v, ok := strings.CutPrefix(l, k); ok {
					f, _ := strconv.ParseFloat(v, 64)
					sum += f
				}
			}
		}
	}
	return sum
}
