package redistest

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Windows has no SIGSTOP and SIGCONT: Pause and Resume fail there.
const sigStop, sigCont = syscall.Signal(0x13), syscall.Signal(0x12)

// signalGroup ends the server for SIGTERM and SIGKILL, the only signals
// there are for a process on Windows; other signals are an error. s.mu is
// held.
func (s *Server) signalGroup(sig syscall.Signal) error {
	if sig != syscall.SIGTERM && sig != syscall.SIGKILL {
		return fmt.Errorf("redistest: %s: %v cannot be sent on Windows", s.Addr, sig)
	}
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redistest: %s: kill: %w", s.Addr, err)
	}
	return nil
}
