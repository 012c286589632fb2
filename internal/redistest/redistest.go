// Package redistest runs real redis-server processes on free loopback ports
// for tests and demos.
//
// The core API (StartServer, StartCluster) does not depend on package testing,
// so it can be used by commands as well; Standalone and NewCluster are thin
// wrappers for tests that stop the servers in t.Cleanup.
//
// Servers listen on 127.0.0.1 only, keep no data on disk and run in their own
// process group, so an interrupt of the terminal does not reach them before
// the test cleans up.
package redistest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNoRedisServer is returned when redis-server is not on PATH.
var ErrNoRedisServer = errors.New("redis-server not found in PATH: run `make test` (it installs redis-server and redis-tools with apt-get) or `apt-get install redis-server redis-tools`")

const (
	readyTimeout = 10 * time.Second // StartServer and Start wait this long for PING
	stopTimeout  = 5 * time.Second  // Stop waits this long after SIGTERM before SIGKILL
	startTries   = 5                // StartServer tries this many ports when the port is taken
	busOffset    = 10000            // cluster bus port = port + busOffset
	logTailLines = 20               // log lines quoted in start errors
)

// Server is one redis-server process listening on Addr.
//
// Its methods are safe for concurrent use. After Stop the Server cannot be
// started again.
type Server struct {
	// Addr is "127.0.0.1:PORT".
	Addr string
	// Port is the TCP port the server listens on; it stays the same across
	// Kill and Start.
	Port int

	bin  string   // path of redis-server
	dir  string   // working directory with the log and, in cluster mode, nodes.conf
	conf string   // config file given as the first argument, or ""
	args []string // extra redis-server arguments
	bus  bool     // cluster mode: Port+busOffset is reserved as well

	mu      sync.Mutex
	cmd     *exec.Cmd     // current process; nil before the first start
	done    chan struct{} // closed once cmd has exited and been reaped
	exitErr error         // result of cmd.Wait, valid after done is closed
	stopped bool
}

// StartServer starts one standalone redis-server on a free loopback port, in
// a new temporary directory, and waits until it answers PING (about 10s).
//
// The server runs without persistence (--save "" --appendonly no), with
// --bind 127.0.0.1, --protected-mode no and --enable-debug-command yes. args
// are extra redis-server arguments such as "--cluster-enabled", "yes"; they
// must not set the port, bind address or directory. If the port turns out to
// be taken, StartServer retries on other ports.
//
// It returns ErrNoRedisServer when redis-server is not on PATH. On error no
// process or directory is left behind. The caller must call Stop.
func StartServer(args ...string) (*Server, error) {
	return startServer("", args...)
}

// startServer is StartServer with an optional configuration: when conf is
// not empty, it is written to redis.conf in the server's directory before
// each try and that file is given to redis-server as its first argument (the
// server may rewrite it, as Sentinel does, and Start after Kill reuses it).
func startServer(conf string, args ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoRedisServer
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: create server directory: %w", err)
	}
	bus := clusterEnabled(args)
	for try := 1; ; try++ {
		port, err := reservePort(bus)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		var confPath string
		if conf != "" {
			confPath = filepath.Join(dir, "redis.conf")
			if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
				releasePort(port, bus)
				_ = os.RemoveAll(dir)
				return nil, fmt.Errorf("redistest: write server config: %w", err)
			}
		}
		s := &Server{
			Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			Port: port,
			bin:  bin,
			dir:  dir,
			conf: confPath,
			args: append([]string(nil), args...),
			bus:  bus,
		}
		s.mu.Lock()
		err = s.start()
		s.mu.Unlock()
		if err == nil {
			return s, nil
		}
		releasePort(port, bus)
		if !errors.Is(err, errAddrInUse) || try == startTries {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
}

// Stop ends the server: SIGTERM, then SIGKILL if it has not exited after 5s.
// It waits for the process to exit and removes the server's directory.
// Stop is idempotent and may be called after Kill or on a paused server.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	var err error
	if s.running() {
		_ = s.signalGroup(syscall.SIGTERM)
		_ = s.signalGroup(sigCont) // a paused server must run to handle SIGTERM
		select {
		case <-s.done:
		case <-time.After(stopTimeout):
			err = s.kill()
		}
	}
	releasePort(s.Port, s.bus)
	return errors.Join(err, os.RemoveAll(s.dir))
}

// Kill ends the server with SIGKILL and waits for it to exit. The port and
// directory are kept, so Start can run the server again. Kill is idempotent;
// it does nothing on a server that is not running.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kill()
}

// Start runs the server again after Kill, on the same port with the same
// arguments, and waits until it answers PING. Its data is gone (there is no
// persistence); in cluster mode its nodes.conf, and so its cluster identity,
// is kept. Start fails if the server is running or has been stopped.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped:
		return fmt.Errorf("redistest: %s: server has been stopped", s.Addr)
	case s.running():
		return fmt.Errorf("redistest: %s: server is already running", s.Addr)
	}
	return s.start()
}

// Restart is Kill followed by Start.
func (s *Server) Restart() error {
	if err := s.Kill(); err != nil {
		return err
	}
	return s.Start()
}

// Pause stops the server process with SIGSTOP: connections stay open but
// nothing is answered until Resume.
func (s *Server) Pause() error { return s.signal(sigStop) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error { return s.signal(sigCont) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running() {
		return fmt.Errorf("redistest: %s: server is not running", s.Addr)
	}
	return s.signalGroup(sig)
}

// running reports whether the current process has not exited. s.mu is held.
func (s *Server) running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL to a running server and waits for it. s.mu is held.
func (s *Server) kill() error {
	if !s.running() {
		return nil
	}
	if err := s.signalGroup(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-s.done:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("redistest: %s: redis-server pid %d did not exit after SIGKILL", s.Addr, s.cmd.Process.Pid)
	}
}

var errAddrInUse = errors.New("address already in use")

// start launches redis-server and waits until it answers PING. On error the
// process has been killed. s.mu is held.
func (s *Server) start() error {
	logPath := filepath.Join(s.dir, "redis.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("redistest: open server log: %w", err)
	}
	logStart, _ := logFile.Seek(0, io.SeekEnd)

	var args []string
	if s.conf != "" {
		args = append(args, s.conf) // a config file must come first
	}
	args = append(args,
		"--port", strconv.Itoa(s.Port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--save", "",
		"--appendonly", "no",
		"--enable-debug-command", "yes",
		"--dir", s.dir,
	)
	cmd := exec.Command(s.bin, append(args, s.args...)...)
	cmd.Dir = s.dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	_ = logFile.Close() // the child has its own copy
	if err != nil {
		return fmt.Errorf("redistest: run %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	s.cmd, s.done, s.exitErr = cmd, done, nil
	go func() {
		err := cmd.Wait()
		s.exitErr = err // read only after done is closed
		close(done)
	}()

	if err := s.waitReady(); err != nil {
		_ = s.kill()
		tail := logTail(logPath, logStart)
		if strings.Contains(tail, "already in use") {
			err = fmt.Errorf("%w: %w", errAddrInUse, err)
		}
		return fmt.Errorf("redistest: start redis-server on %s: %w\nlast lines of %s:\n%s", s.Addr, err, logPath, tail)
	}
	return nil
}

// waitReady waits until the server answers PING and reports the pid of our
// process, so that another server on the same port is not mistaken for it.
func (s *Server) waitReady() error {
	deadline := time.Now().Add(readyTimeout)
	var lastErr error
	for {
		select {
		case <-s.done:
			return fmt.Errorf("redis-server exited: %v", s.exitErr)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer to PING after %v: %v", readyTimeout, lastErr)
		}
		if lastErr = s.ping(); lastErr == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) ping() error {
	if reply, err := do(s.Addr, time.Second, "PING"); err != nil {
		return err
	} else if reply != "PONG" {
		return fmt.Errorf("PING answered %q", reply)
	}
	info, err := do(s.Addr, time.Second, "INFO", "server")
	if err != nil {
		return err
	}
	if want := fmt.Sprintf("process_id:%d\r\n", s.cmd.Process.Pid); !strings.Contains(info, want) {
		return fmt.Errorf("%s is served by another process", s.Addr)
	}
	return nil
}

// logTail returns the last lines of the log written since offset.
func logTail(path string, offset int64) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if offset <= int64(len(data)) {
		data = data[offset:]
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// clusterEnabled reports whether args contain "--cluster-enabled yes".
func clusterEnabled(args []string) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--cluster-enabled" && strings.EqualFold(args[i+1], "yes") {
			return true
		}
	}
	return false
}

// reserved holds the ports (and cluster bus ports) handed out to servers of
// this process, so that two servers never get the same or overlapping ports.
var reserved = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// reservePort picks a free loopback port. With bus, port+10000 must be free
// and below 65536 as well.
func reservePort(bus bool) (int, error) {
	for range 200 {
		port, err := freePort(0)
		if err != nil {
			return 0, err
		}
		if bus && (port+busOffset > 65535 || !portFree(port+busOffset)) {
			continue
		}
		reserved.Lock()
		taken := reserved.ports[port] || (bus && reserved.ports[port+busOffset])
		if !taken {
			reserved.ports[port] = true
			if bus {
				reserved.ports[port+busOffset] = true
			}
		}
		reserved.Unlock()
		if !taken {
			return port, nil
		}
	}
	return 0, errors.New("redistest: no free loopback port found")
}

func releasePort(port int, bus bool) {
	reserved.Lock()
	defer reserved.Unlock()
	delete(reserved.ports, port)
	if bus {
		delete(reserved.ports, port+busOffset)
	}
}

// freePort listens on 127.0.0.1:port (0 for any), closes, and returns the port.
func freePort(port int) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return 0, fmt.Errorf("redistest: find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func portFree(port int) bool {
	_, err := freePort(port)
	return err == nil
}
