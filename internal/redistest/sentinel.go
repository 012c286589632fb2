package redistest

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	sentinelMasterName = "redisync" // the name the Sentinels monitor the primary under

	sentinelTimeout = 30 * time.Second // StartSentinel and Failover wait this long
	pollTimeout     = time.Second      // one status command while waiting
	pollInterval    = 50 * time.Millisecond
)

// Sentinel is a replicated Redis deployment watched by Sentinels, all on
// loopback: one primary, its replicas and the Sentinel processes that
// monitor them.
//
// Failover and WaitPrimary update Primary and Replicas; the methods are not
// safe for concurrent use with each other or with reads of these fields.
type Sentinel struct {
	// MasterName is the name the Sentinels monitor the primary under
	// ("redisync"), as given to a client's sentinel option.
	MasterName string
	// Primary is the current primary.
	Primary *Server
	// Replicas are the data servers other than Primary, in start order.
	// After WaitPrimary they include the former primary, killed or paused by
	// the test: once it answers again, the Sentinels make it a replica of
	// the new primary (about 10s later).
	Replicas []*Server
	// Sentinels are the Sentinel processes. Server works for them as well:
	// Addr, Do, Kill, Start and Stop; Start after Kill keeps the Sentinel's
	// configuration, which it rewrites as it learns about the deployment.
	Sentinels []*Server

	nodes []*Server // the primary and replicas in start order
}

// StartSentinel starts one primary, replicas replicas (--replicaof the
// primary) and sentinels Sentinel processes that monitor the primary under
// the name "redisync" with a quorum of sentinels/2+1.
//
// Data servers run as StartServer's servers with --replica-announce-ip
// 127.0.0.1 and --repl-diskless-sync-delay 0. Each Sentinel runs
// "redis-server redis.conf --sentinel" with the config file in its own
// directory, announcing 127.0.0.1 and using fast timeouts:
// down-after-milliseconds 1000, failover-timeout 5000, parallel-syncs 1.
//
// StartSentinel waits (about 30s) until every replica reports
// master_link_status:up and every Sentinel knows the primary, all replicas
// (linked to the primary) and all other Sentinels.
//
// It returns ErrNoRedisServer when redis-server is not on PATH. On error every
// started server has been stopped. The caller must call Stop.
func StartSentinel(replicas, sentinels int) (*Sentinel, error) {
	if replicas < 0 || sentinels < 1 {
		return nil, fmt.Errorf("redistest: a sentinel deployment needs no negative replica count and at least 1 sentinel, got %d and %d", replicas, sentinels)
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, ErrNoRedisServer
	}
	s := &Sentinel{MasterName: sentinelMasterName}
	if err := s.start(replicas, sentinels); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	return s, nil
}

// NewSentinel starts a Sentinel deployment for one test (see StartSentinel)
// and stops it in t.Cleanup. Any failure fails the test with t.Fatal.
func NewSentinel(t testing.TB, replicas, sentinels int) *Sentinel {
	t.Helper()
	s, err := StartSentinel(replicas, sentinels)
	if err != nil {
		t.Fatalf("redistest: start sentinel deployment with %d replicas and %d sentinels: %v", replicas, sentinels, err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("redistest: stop sentinel deployment: %v", err)
		}
	})
	return s
}

func (s *Sentinel) start(replicas, sentinels int) error {
	dataArgs := []string{
		"--replica-announce-ip", "127.0.0.1",
		"--repl-diskless-sync-delay", "0", // replicas sync at once
	}
	primary, err := StartServer(dataArgs...)
	if err != nil {
		return err
	}
	s.Primary = primary
	s.nodes = []*Server{primary}

	s.Replicas = make([]*Server, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range s.Replicas {
		wg.Go(func() {
			s.Replicas[i], errs[i] = StartServer(slices.Concat(dataArgs, []string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)})...)
		})
	}
	wg.Wait()
	s.nodes = append(s.nodes, s.Replicas...) // nil entries are skipped by Stop
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := waitFor(sentinelTimeout, "replicas not linked to the primary", func() error {
		return linked(primary, s.Replicas)
	}); err != nil {
		return err
	}

	conf := fmt.Sprintf(`sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d
sentinel down-after-milliseconds %[1]s 1000
sentinel failover-timeout %[1]s 5000
sentinel parallel-syncs %[1]s 1
sentinel announce-ip 127.0.0.1
sentinel resolve-hostnames no
`, s.MasterName, primary.Port, sentinels/2+1)
	s.Sentinels = make([]*Server, sentinels)
	errs = make([]error, sentinels)
	for i := range s.Sentinels {
		wg.Go(func() { s.Sentinels[i], errs[i] = startServer(conf, "--sentinel") })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return waitFor(sentinelTimeout, "sentinels do not know the deployment", s.sentinelsReady)
}

// sentinelsReady returns why a Sentinel does not know the primary, a
// replica or another Sentinel yet, or nil.
func (s *Sentinel) sentinelsReady() error {
	for _, sen := range s.Sentinels {
		m, err := s.masterOf(sen)
		if err != nil {
			return err
		}
		if addr := net.JoinHostPort(m["ip"], m["port"]); addr != s.Primary.Addr || m["flags"] != "master" {
			return fmt.Errorf("sentinel %s sees master %s with flags %q, want %s with flags \"master\"", sen.Addr, addr, m["flags"], s.Primary.Addr)
		}

		reply, err := do(sen.Addr, pollTimeout, "SENTINEL", "REPLICAS", s.MasterName)
		if err != nil {
			return err
		}
		var known []string
		for _, r := range replyMaps(reply) {
			addr := net.JoinHostPort(r["ip"], r["port"])
			if r["flags"] != "slave" || r["master-link-status"] != "ok" || r["master-port"] != strconv.Itoa(s.Primary.Port) {
				return fmt.Errorf("sentinel %s sees replica %s with flags %q, master-port %s, master-link-status %s", sen.Addr, addr, r["flags"], r["master-port"], r["master-link-status"])
			}
			known = append(known, addr)
		}
		for _, r := range s.Replicas {
			if !slices.Contains(known, r.Addr) {
				return fmt.Errorf("sentinel %s does not know replica %s (knows %v)", sen.Addr, r.Addr, known)
			}
		}

		reply, err = do(sen.Addr, pollTimeout, "SENTINEL", "SENTINELS", s.MasterName)
		if err != nil {
			return err
		}
		others := 0
		for _, o := range replyMaps(reply) {
			if o["flags"] != "sentinel" {
				return fmt.Errorf("sentinel %s sees sentinel %s:%s with flags %q", sen.Addr, o["ip"], o["port"], o["flags"])
			}
			others++
		}
		if others != len(s.Sentinels)-1 {
			return fmt.Errorf("sentinel %s knows %d other sentinels, want %d", sen.Addr, others, len(s.Sentinels)-1)
		}
	}
	return nil
}

// SentinelAddrs returns the Sentinel addresses, suitable as a client's seed
// list.
func (s *Sentinel) SentinelAddrs() []string { return addrsOf(s.Sentinels) }

// Failover sends SENTINEL FAILOVER to a Sentinel (the first that accepts it)
// and waits (about 30s) until every running Sentinel reports a new primary
// address, the new primary answers ROLE with master and every other running
// data server, the former primary included, replicates it with
// master_link_status:up. It then updates Primary and Replicas.
//
// Sentinel itself turns the former primary, which still runs as a master
// after the switch, into a replica only about 10s later; once the Sentinels
// agree on the new primary, Failover does so at once with REPLICAOF, so that
// a failover takes one or two seconds.
func (s *Sentinel) Failover() error {
	if len(s.nodes) < 2 {
		return errors.New("redistest: failover needs at least one replica")
	}
	old := s.Primary
	deadline := time.Now().Add(sentinelTimeout)
	for {
		err := s.requestFailover()
		if err == nil {
			break
		}
		// A Sentinel may not yet consider a replica fit to be promoted, for
		// example right after a previous failover.
		if !strings.HasPrefix(err.Error(), "NOGOODSLAVE") || time.Now().After(deadline) {
			return fmt.Errorf("redistest: SENTINEL FAILOVER %s: %w", s.MasterName, err)
		}
		time.Sleep(pollInterval)
	}
	return s.waitSwitch(old, time.Until(deadline), nil)
}

// requestFailover sends SENTINEL FAILOVER to the running Sentinels in turn
// until one accepts it. A failover already in progress counts as accepted.
func (s *Sentinel) requestFailover() error {
	var errs []error
	for _, sen := range s.Sentinels {
		if !sen.alive() {
			continue
		}
		_, err := do(sen.Addr, pollTimeout, "SENTINEL", "FAILOVER", s.MasterName)
		if err == nil || strings.HasPrefix(err.Error(), "INPROG") {
			return nil
		}
		var replyErr replyError
		if errors.As(err, &replyErr) {
			return err // the Sentinel answered: others would say the same
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return errors.New("no sentinel is running")
	}
	return errors.Join(errs...)
}

// WaitPrimary waits, after a test killed or paused the primary, until every
// running Sentinel reports a new primary address, the new primary answers
// ROLE with master and every other running data server except the former
// primary replicates it with master_link_status:up (like Failover, it turns
// such a server that still is a master into a replica). It then updates
// Primary and Replicas, which keep the former primary: the Sentinels make it
// a replica of the new primary about 10s after it answers again.
//
// The Sentinels promote a replica about 2-4s after the primary stops
// answering, but retry a failed leader election only 10s later: a timeout
// of 30s leaves room for that.
func (s *Sentinel) WaitPrimary(timeout time.Duration) error {
	return s.waitSwitch(s.Primary, timeout, s.Primary)
}

// waitSwitch waits until the Sentinels agree on a primary other than old and
// the data servers other than skip follow it, then updates Primary and
// Replicas.
func (s *Sentinel) waitSwitch(old *Server, timeout time.Duration, skip *Server) error {
	var primary *Server
	err := waitFor(timeout, "no new primary", func() error {
		var err error
		primary, err = s.agreedPrimary()
		if err != nil {
			return err
		}
		if primary == old {
			return fmt.Errorf("sentinels still report the former primary %s", old.Addr)
		}
		if err := s.sentinelsLinked(primary); err != nil {
			return err
		}
		role, err := do(primary.Addr, pollTimeout, "ROLE")
		if err != nil {
			return err
		}
		if first, _, _ := strings.Cut(role, "\n"); first != "master" {
			return fmt.Errorf("%s, reported by the sentinels, answers ROLE with %s", primary.Addr, first)
		}
		var replicas []*Server
		for _, n := range s.nodes {
			if n != primary && n != skip && n.alive() {
				replicas = append(replicas, n)
			}
		}
		if err := demote(primary, replicas); err != nil {
			return err
		}
		return linked(primary, replicas)
	})
	if err != nil {
		return err
	}
	s.Primary = primary
	s.Replicas = nil
	for _, n := range s.nodes {
		if n != primary {
			s.Replicas = append(s.Replicas, n)
		}
	}
	return nil
}

// sentinelsLinked returns why a running Sentinel has no working link to
// primary yet, or nil.
//
// After a switch a Sentinel connects to the new primary anew, but not sooner
// than a second after its last connection attempt to the former one; with
// down-after-milliseconds 1000 it may then find the new primary down and, if
// a replica is available (say the former primary started again), fail over
// once more. Once every Sentinel has had an answer to a PING from the new
// primary (no PING pending), that does not happen.
func (s *Sentinel) sentinelsLinked(primary *Server) error {
	for _, sen := range s.Sentinels {
		if !sen.alive() {
			continue
		}
		m, err := s.masterOf(sen)
		if err != nil {
			return err
		}
		if addr := net.JoinHostPort(m["ip"], m["port"]); addr != primary.Addr || m["flags"] != "master" || m["last-ping-sent"] != "0" {
			return fmt.Errorf("sentinel %s sees master %s with flags %q and a PING pending for %sms, want %s with flags \"master\" and no PING pending",
				sen.Addr, addr, m["flags"], m["last-ping-sent"], primary.Addr)
		}
	}
	return nil
}

// masterOf returns the fields of SENTINEL MASTER on the Sentinel sen.
func (s *Sentinel) masterOf(sen *Server) (map[string]string, error) {
	reply, err := do(sen.Addr, pollTimeout, "SENTINEL", "MASTER", s.MasterName)
	if err != nil {
		return nil, err
	}
	if ms := replyMaps(reply); len(ms) == 1 {
		return ms[0], nil
	}
	return nil, fmt.Errorf("unexpected SENTINEL MASTER reply from %s: %q", sen.Addr, reply)
}

// agreedPrimary returns the data server that every running Sentinel reports
// as the primary.
func (s *Sentinel) agreedPrimary() (*Server, error) {
	var addr string
	for _, sen := range s.Sentinels {
		if !sen.alive() {
			continue
		}
		reply, err := do(sen.Addr, pollTimeout, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
		if err != nil {
			return nil, err
		}
		ip, port, _ := strings.Cut(reply, "\n")
		a := net.JoinHostPort(ip, port)
		if addr != "" && a != addr {
			return nil, fmt.Errorf("sentinels disagree on the primary: %s and %s", addr, a)
		}
		addr = a
	}
	if addr == "" {
		return nil, errors.New("no sentinel is running")
	}
	for _, n := range s.nodes {
		if n.Addr == addr {
			return n, nil
		}
	}
	return nil, fmt.Errorf("sentinels report primary %s, which is not a server of the deployment", addr)
}

// Stop stops every Sentinel, then every data server (see Server.Stop). It is
// idempotent.
func (s *Sentinel) Stop() error {
	return errors.Join(stopAll(s.Sentinels), stopAll(s.nodes))
}

func stopAll(servers []*Server) error {
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		if srv != nil {
			wg.Go(func() { errs[i] = srv.Stop() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// demote makes every server of replicas that still is a master a replica of
// primary, as the Sentinels would do themselves about 10s after the switch.
func demote(primary *Server, replicas []*Server) error {
	for _, r := range replicas {
		role, err := do(r.Addr, pollTimeout, "ROLE")
		if err != nil {
			return err
		}
		if first, _, _ := strings.Cut(role, "\n"); first != "master" {
			continue
		}
		if _, err := do(r.Addr, pollTimeout, "REPLICAOF", "127.0.0.1", strconv.Itoa(primary.Port)); err != nil {
			return err
		}
	}
	return nil
}

// linked returns why a replica does not replicate primary with
// master_link_status:up yet, or nil.
func linked(primary *Server, replicas []*Server) error {
	for _, r := range replicas {
		info, err := do(r.Addr, pollTimeout, "INFO", "replication")
		if err != nil {
			return err
		}
		f := infoFields(info)
		if f["role"] != "slave" || f["master_port"] != strconv.Itoa(primary.Port) || f["master_link_status"] != "up" {
			return fmt.Errorf("%s reports role:%s master_port:%s master_link_status:%s, want a replica of %s with the link up",
				r.Addr, f["role"], f["master_port"], f["master_link_status"], primary.Addr)
		}
	}
	return nil
}

// waitFor calls ready until it returns nil or timeout has passed.
func waitFor(timeout time.Duration, what string, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: %s after %v: %w", what, timeout.Round(time.Millisecond), err)
		}
		time.Sleep(pollInterval)
	}
}

// replyMaps parses a rendered Sentinel reply that lists instances as
// field/value pairs (SENTINEL MASTER, REPLICAS, SENTINELS): every instance
// starts with the "name" field.
func replyMaps(reply string) []map[string]string {
	var maps []map[string]string
	var cur map[string]string
	lines := strings.Split(reply, "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		if cur == nil || lines[i] == "name" {
			cur = map[string]string{}
			maps = append(maps, cur)
		}
		cur[lines[i]] = lines[i+1]
	}
	return maps
}

// alive reports whether the server's process is running (it may be paused).
func (s *Server) alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running()
}
