//go:build !windows

package redistest

import (
	"errors"
	"fmt"
	"syscall"
)

// The signals of Pause and Resume.
const sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT

// signalGroup sends sig to the server's process group. s.mu is held.
func (s *Server) signalGroup(sig syscall.Signal) error {
	if err := syscall.Kill(-s.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("redistest: %s: send %v: %w", s.Addr, sig, err)
	}
	return nil
}
