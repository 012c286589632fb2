package redisync

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func startMonitor(t *testing.T, e *env) {
	host, port, _ := strings.Cut(e.addrs[0], ":")
	f, _ := os.Create("/tmp/monitor.log")
	cmd := exec.Command("redis-cli", "-h", host, "-p", port, "monitor")
	cmd.Stdout = f
	_ = cmd.Start()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); f.Close() })
	m, _ := os.Create("/tmp/shas.txt")
	for n, s := range map[string]script{"acquire": acquireScript, "release": releaseScript, "renew": renewScript, "group": groupAcquireScript, "fair": fairAcquireScript, "leave": leaveScript, "presence": presenceScript} {
		fmt.Fprintf(m, "%s %s\n", s.sha, n)
	}
	m.Close()
}
