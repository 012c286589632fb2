package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

const (
	dialTimeout = time.Second
	doTimeout   = 5 * time.Second
)

// Do sends one command to the server over a new TCP connection and returns
// the reply as text: simple and bulk strings as they are, integers in
// decimal, nil as "", and arrays as their rendered elements joined with
// "\n". An error reply is returned as an error whose message is the reply
// text (for example "ERR unknown command ..."). Connecting times out after
// 1s, the whole exchange after 5s.
func (s *Server) Do(args ...string) (string, error) {
	return do(s.Addr, doTimeout, args...)
}

func do(addr string, timeout time.Duration, args ...string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("redistest: Do needs a command")
	}
	conn, err := net.DialTimeout("tcp", addr, min(dialTimeout, timeout))
	if err != nil {
		return "", fmt.Errorf("redistest: %w", err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", fmt.Errorf("redistest: %w", err)
	}

	var req strings.Builder
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, req.String()); err != nil {
		return "", fmt.Errorf("redistest: %s %s: %w", addr, args[0], err)
	}
	reply, err := readReply(bufio.NewReader(conn))
	var replyErr replyError
	if err != nil && !errors.As(err, &replyErr) {
		return "", fmt.Errorf("redistest: %s %s: %w", addr, args[0], err)
	}
	return reply, err
}

// replyError is an error reply from the server.
type replyError string

func (e replyError) Error() string { return string(e) }

// readReply reads and renders one RESP2 reply.
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply line")
	}
	kind, body := line[0], line[1:]
	switch kind {
	case '+', ':':
		return body, nil
	case '-':
		return "", replyError(body)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return "", err // "$-1" is nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return "", err // "*-1" is nil
		}
		elems := make([]string, n)
		for i := range elems {
			if elems[i], err = readReply(r); err != nil {
				return "", err
			}
		}
		return strings.Join(elems, "\n"), nil
	default:
		return "", fmt.Errorf("unexpected reply %q", line)
	}
}
