package redisync

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/redis/rueidis"
)

// errPrefix starts every error message of the package, once.
const errPrefix = "redisync: "

// pkgError is an error of the package: its message, with one prefix, and
// the errors it wraps, for errors.Is and errors.As.
type pkgError struct {
	msg  string
	errs []error
}

func (e *pkgError) Error() string   { return e.msg }
func (e *pkgError) Unwrap() []error { return e.errs }

// errorf formats an error as fmt.Errorf does, and wraps every error among
// args. Its message starts with "redisync: " once: the prefixes of the
// package's errors it shows are left out, and so are the digest and line
// that Redis appends to the errors of scripts.
func errorf(format string, args ...any) error {
	e := &pkgError{}
	shown := make([]any, len(args))
	for i, a := range args {
		if err, ok := a.(error); ok && err != nil {
			e.errs = append(e.errs, err)
			a = bareMessage(err)
		}
		shown[i] = a
	}
	msg := fmt.Sprintf(strings.ReplaceAll(format, "%w", "%v"), shown...)
	e.msg = errPrefix + strings.TrimPrefix(msg, errPrefix)
	return e
}

var (
	// innerPrefix is the package's prefix where a message shows another
	// error: at its start, after a colon, a semicolon or a parenthesis.
	innerPrefix = regexp.MustCompile(`(^|: |; |\()` + regexp.QuoteMeta(errPrefix))
	// scriptSuffix is what Redis appends to an error raised in a script.
	scriptSuffix = regexp.MustCompile(` ?script: [0-9a-f]{40}, on @user_script:[0-9]+\.?`)
)

// bareMessage is err's message as another error shows it: without the
// package's prefixes and without script digests and lines.
func bareMessage(err error) string {
	msg := innerPrefix.ReplaceAllString(err.Error(), "$1")
	return scriptSuffix.ReplaceAllString(msg, "")
}

// redisErr wraps an error from Redis or the connection, marking wrong-type
// replies and a closing client. The reply stays in the chain for
// errors.As (*rueidis.RedisError).
func redisErr(op string, err error) error {
	if re, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(re.Error(), "WRONGTYPE") {
		return errorf("%s: %w: %w", op, ErrWrongType, err)
	}
	if errors.Is(err, rueidis.ErrClosing) {
		return errorf("%s: %w: %w", op, ErrClosed, err)
	}
	return errorf("%s: %w", op, err)
}
