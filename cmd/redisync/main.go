// Command redisync works with redisync locks from the command line.
//
// Install it with
//
//	go install github.com/redisync/redisync/cmd/redisync@latest
//
// and run `redisync help` for the list of commands. For operators,
// `redisync inspect NAME` shows who holds a lock, its lease, fencing token
// and waiters (--json for scripts), `redisync watch NAME...` the same as a
// live view, and `redisync unlock --force NAME` breaks a lock as
// ForceUnlock does. `redisync demo` runs a self-contained demonstration:
// workers contending for one Mutex, then a lease lost to a force-unlock and
// fenced off by its token.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Exit statuses.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130 // the shell convention for a process ended by SIGINT
)

// command is one subcommand. Each lives in its own file.
type command struct {
	name     string
	synopsis string // the arguments after the command's name, for usage lines
	summary  string // one line for the command list
	help     string // what the command does, printed by `redisync <name> -h`
	// flags defines the command's flags on fs and returns the function that
	// runs the command once they are parsed. It gets the arguments left
	// after the flags and reports bad ones with usageErrorf.
	flags func(fs *flag.FlagSet) runFunc
}

type runFunc func(ctx context.Context, args []string, stdout io.Writer) error

// commands lists the subcommands in the order usage shows them.
var commands = []*command{
	inspectCommand,
	watchCommand,
	unlockCommand,
	demoCommand,
	versionCommand,
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// usageError reports bad arguments: the process exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal the command winds down (and stops what it
	// started); a second one ends the process at once.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args (without the program name) and returns
// the exit status. Errors are reported on stderr in one line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if name == "help" && len(rest) > 0 {
			c := lookup(rest[0])
			if c == nil {
				fmt.Fprintf(stderr, "redisync help: unknown command %q (run 'redisync help' for the list)\n", rest[0])
				return exitUsage
			}
			printCommandUsage(stdout, c)
			return exitOK
		}
		printUsage(stdout)
		return exitOK
	case "-version", "--version":
		name = "version"
	}
	c := lookup(name)
	if c == nil {
		if strings.HasPrefix(name, "-") {
			fmt.Fprintf(stderr, "redisync: unknown flag %s: flags go after the command (run 'redisync help' for usage)\n", name)
		} else {
			fmt.Fprintf(stderr, "redisync: unknown command %q (run 'redisync help' for usage)\n", name)
		}
		return exitUsage
	}

	fs := newFlagSet(c)
	runCmd := c.flags(fs)
	args, err := parseInterspersed(fs, rest)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printCommandUsage(stdout, c)
		return exitOK
	case err != nil:
		err = &usageError{msg: err.Error()}
	default:
		err = runCmd(ctx, args, stdout)
	}
	var uerr *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &uerr):
		fmt.Fprintf(stderr, "redisync %s: %s (run 'redisync %s -h' for usage)\n", c.name, uerr.msg, c.name)
		return exitUsage
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "redisync %s: interrupted\n", c.name)
		return exitInterrupted
	default:
		fmt.Fprintf(stderr, "redisync %s: %s\n", c.name, errorLine(err))
		return exitFailure
	}
}

// oneLine folds a multi-line error message into one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// errorLine is err's message in one line, without the "redisync: " that
// starts the library's errors: the command's own prefix says it.
func errorLine(err error) string {
	return oneLine(strings.TrimPrefix(err.Error(), "redisync: "))
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `redisync works with distributed locks on Redis.

Usage:
  redisync <command> [flags]

Commands:
`)
	width := 0
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprint(w, `
Run 'redisync <command> -h' (or 'redisync help <command>') for the flags of a command.
`)
}

// newFlagSet returns an empty flag set for c. It prints nothing itself:
// run reports its errors in one line.
func newFlagSet(c *command) *flag.FlagSet {
	fs := flag.NewFlagSet("redisync "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseInterspersed parses the flags in args, before and after the
// arguments that are not flags (`inspect NAME --json` as well as `inspect
// --json NAME`), and returns those arguments. Everything after "--" is an
// argument.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		left := fs.Args()
		if n := len(args) - len(left); n > 0 && args[n-1] == "--" {
			return append(rest, left...), nil
		}
		if len(left) == 0 {
			return rest, nil
		}
		rest, args = append(rest, left[0]), left[1:]
	}
}

// noArgs reports leftover arguments of a command that takes none.
func noArgs(args []string) error {
	if len(args) > 0 {
		return usageErrorf("unexpected argument %q", args[0])
	}
	return nil
}

// printCommandUsage prints the usage of c and its flags.
func printCommandUsage(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage: redisync %s %s\n\n%s\n", c.name, c.synopsis, strings.TrimSpace(c.help))
	fs := newFlagSet(c)
	c.flags(fs)
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		arg := "--" + f.Name
		if name != "" {
			arg += " " + name
		}
		fmt.Fprintf(&b, "  %s\n      %s", arg, usage)
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
			fmt.Fprintf(&b, " (default %s)", f.DefValue)
		}
		b.WriteString("\n")
	})
	if b.Len() > 0 {
		fmt.Fprintf(w, "\nFlags:\n%s", b.String())
	}
}
