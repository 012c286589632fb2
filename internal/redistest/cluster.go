package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

const clusterTimeout = 30 * time.Second // StartCluster waits this long for the cluster to form

// Cluster is a Redis Cluster of real redis-server processes.
type Cluster struct {
	// Masters are the nodes that own the 16384 hash slots.
	Masters []*Server
	// Replicas are the replica nodes, replicasPerMaster for each master.
	Replicas []*Server
}

// StartCluster starts masters (at least 3) plus replicasPerMaster*masters
// replica servers in cluster mode (--cluster-enabled yes, nodes.conf in each
// server's directory, --cluster-node-timeout 2000, --cluster-announce-ip
// 127.0.0.1), creates the cluster with redis-cli, and waits (about 30s) until
// every node reports cluster_state:ok with all 16384 slots assigned and knows
// all nodes, and every replica is linked to its master. args are extra
// redis-server arguments for every node (see StartServer), such as
// "--appendonly", "yes" for nodes that keep their data across Kill and
// Start.
//
// It returns ErrNoRedisServer when redis-server is not on PATH and an error
// asking to install redis-tools when redis-cli is missing. On error every
// started server has been stopped. The caller must call Stop.
func StartCluster(masters, replicasPerMaster int, args ...string) (*Cluster, error) {
	if masters < 3 || replicasPerMaster < 0 {
		return nil, fmt.Errorf("redistest: a cluster needs at least 3 masters and no negative replica count, got %d and %d", masters, replicasPerMaster)
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, ErrNoRedisServer
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, errors.New("redis-cli not found in PATH: run `make test` (it installs redis-server and redis-tools with apt-get) or `apt-get install redis-tools`")
	}

	nodes := make([]*Server, masters*(1+replicasPerMaster))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			nodes[i], errs[i] = StartServer(append([]string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf", // relative to the server's directory
				"--cluster-node-timeout", "2000",
				"--cluster-announce-ip", "127.0.0.1",
				"--repl-diskless-sync-delay", "0", // replicas sync at once
			}, args...)...)
		})
	}
	wg.Wait()
	c, err := createCluster(cli, nodes, replicasPerMaster, errors.Join(errs...))
	if err != nil {
		for _, s := range nodes {
			if s != nil {
				_ = s.Stop()
			}
		}
		return nil, err
	}
	return c, nil
}

func createCluster(cli string, nodes []*Server, replicasPerMaster int, startErr error) (*Cluster, error) {
	if startErr != nil {
		return nil, startErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()

	args := []string{"--cluster", "create"}
	for _, s := range nodes {
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %w\n%s", err, out)
	}

	for {
		notReady := clusterNotReady(nodes)
		if notReady == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("redistest: cluster not ready after %v: %w", clusterTimeout, notReady)
		case <-time.After(50 * time.Millisecond):
		}
	}

	c := &Cluster{}
	for _, s := range nodes {
		role, err := s.Do("ROLE")
		if err != nil {
			return nil, err
		}
		if first, _, _ := strings.Cut(role, "\n"); first == "master" {
			c.Masters = append(c.Masters, s)
		} else {
			c.Replicas = append(c.Replicas, s)
		}
	}
	if len(c.Masters)*(1+replicasPerMaster) != len(nodes) {
		return nil, fmt.Errorf("redistest: cluster formed with %d masters and %d replicas", len(c.Masters), len(c.Replicas))
	}
	return c, nil
}

// clusterNotReady returns why the cluster is not ready yet, or nil.
func clusterNotReady(nodes []*Server) error {
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": "16384",
		"cluster_known_nodes":    strconv.Itoa(len(nodes)),
	}
	for _, s := range nodes {
		info, err := s.Do("CLUSTER", "INFO")
		if err != nil {
			return err
		}
		fields := infoFields(info)
		for k, v := range want {
			if fields[k] != v {
				return fmt.Errorf("%s reports %s:%s, want %s", s.Addr, k, fields[k], v)
			}
		}
		repl, err := s.Do("INFO", "replication")
		if err != nil {
			return err
		}
		fields = infoFields(repl)
		if fields["role"] == "slave" && fields["master_link_status"] != "up" {
			return fmt.Errorf("%s reports master_link_status:%s, want up", s.Addr, fields["master_link_status"])
		}
	}
	return nil
}

// infoFields parses "key:value" lines of INFO or CLUSTER INFO output.
func infoFields(info string) map[string]string {
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields
}

// Addrs returns the master addresses, suitable as a client's seed list.
func (c *Cluster) Addrs() []string { return addrsOf(c.Masters) }

// addrsOf returns the addresses of servers.
func addrsOf(servers []*Server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr
	}
	return addrs
}

// Stop stops every server of the cluster (see Server.Stop). It is idempotent.
func (c *Cluster) Stop() error {
	all := append(append([]*Server(nil), c.Masters...), c.Replicas...)
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, s := range all {
		wg.Go(func() { errs[i] = s.Stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}
