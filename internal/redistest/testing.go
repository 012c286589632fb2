package redistest

import "testing"

// Standalone starts a server for one test (see StartServer) and stops it in
// t.Cleanup. Any failure, including ErrNoRedisServer, fails the test with
// t.Fatal: a test never skips because Redis is missing.
func Standalone(t testing.TB, args ...string) *Server {
	t.Helper()
	s, err := StartServer(args...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("redistest: stop %s: %v", s.Addr, err)
		}
	})
	return s
}

// NewCluster starts a cluster for one test (see StartCluster, which takes
// args for every node) and stops it in t.Cleanup. Any failure fails the test
// with t.Fatal.
func NewCluster(t testing.TB, masters, replicasPerMaster int, args ...string) *Cluster {
	t.Helper()
	c, err := StartCluster(masters, replicasPerMaster, args...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("redistest: stop cluster: %v", err)
		}
	})
	return c
}
