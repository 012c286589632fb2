package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

var unlockCommand = &command{
	name:     "unlock",
	synopsis: "--force [--kind mutex|fair|rw] [--yes] [connection flags] NAME",
	summary:  "break a lock whoever holds it (ForceUnlock), after confirmation",
	help: `
Breaks the lock NAME whoever holds it, as ForceUnlock does: the lock's key
is deleted and its waiters are woken. The holder's lease reports
ErrForceUnlocked (its Lost channel is closed): about one round trip later
when its Client learns of changes to its keys (Dial, DialURL, goredis.Dial,
New with DetectChanges), at its next renewal, within a third of its
lease, otherwise (New alone, RESP2, caching disabled); until then it
believes it still holds the lock. Use it for a lock
whose holder is gone or stuck, and rely on fencing tokens to keep a holder
that is alive from writing late.

--force is required. Without --kind, every kind of lock held under NAME is
broken: the Mutex, the FairMutex (its queue stays) and the RWMutex (the
writer and every read share). Semaphores and latches are not locks of one
holder and are left alone.

The command lists what it is about to break and asks for confirmation on
the terminal; --yes skips the question, and is required when stdin is not
a terminal. A declined confirmation exits with status 1. A name with
nothing held prints so and exits with status 0.` + connHelp,
	flags: func(fs *flag.FlagSet) runFunc {
		var conn connFlags
		conn.register(fs)
		force := fs.Bool("force", false, "required: break the lock although its holder may be alive")
		kindFlag := fs.String("kind", "", "break only the lock of this `kind`: mutex, fair or rw (default: every kind held)")
		yes := fs.Bool("yes", false, "do not ask for confirmation")
		return func(ctx context.Context, args []string, stdout io.Writer) error {
			name, err := oneName(args)
			if err != nil {
				return err
			}
			switch *kindFlag {
			case "", "mutex", "fair", "rw":
			default:
				return usageErrorf("--kind must be mutex, fair or rw, got %q", *kindFlag)
			}
			if !*force {
				return usageErrorf("--force is required: the holder of the lock loses it while it may still be working")
			}
			if !*yes && !isatty(os.Stdin.Fd()) {
				return usageErrorf("stdin is not a terminal to ask for confirmation on: pass --yes to unlock without asking")
			}
			c, err := conn.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			u := &unlocker{c: c, conn: &conn, name: name, kind: *kindFlag, out: stdout}
			if !*yes {
				u.confirm = func(ctx context.Context, question string) (bool, error) {
					return confirm(ctx, os.Stdin, os.Stderr, question)
				}
			}
			return u.run(ctx)
		}
	},
}

type unlocker struct {
	c    *client
	conn *connFlags
	name string
	kind string // "" for every kind held
	out  io.Writer
	// confirm asks the question; nil: do not ask.
	confirm func(ctx context.Context, question string) (bool, error)
}

func (u *unlocker) run(ctx context.Context) error {
	rctx, cancel := u.conn.request(ctx)
	snap, err := inspect(rctx, u.c, u.name, "")
	cancel()
	if err != nil {
		return err
	}
	var targets []kind
	for _, k := range snap.Kinds {
		if (u.kind == "" || u.kind == kindName(k)) && held(k) {
			targets = append(targets, k)
		}
	}
	if len(targets) == 0 {
		what := "no mutex, fair mutex or rw mutex"
		if u.kind != "" {
			what = "no " + map[string]string{"mutex": "mutex", "fair": "fair mutex", "rw": "rw mutex"}[u.kind]
		}
		fmt.Fprintf(u.out, "%s: nothing to unlock (%s held)\n", u.name, what)
		return nil
	}

	if u.confirm != nil {
		descs := make([]string, len(targets))
		for i, k := range targets {
			descs[i] = describe(k)
		}
		ok, err := u.confirm(ctx, fmt.Sprintf("Force-unlock %s (%s)? [y/N] ", u.name, strings.Join(descs, "; ")))
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("not confirmed: nothing was unlocked")
		}
	}

	for _, k := range targets {
		rctx, cancel := u.conn.request(ctx)
		var ok bool
		switch kindName(k) {
		case "mutex":
			ok, err = u.c.Mutex(u.name).ForceUnlock(rctx)
		case "fair":
			ok, err = u.c.FairMutex(u.name).ForceUnlock(rctx)
		case "rw":
			ok, err = u.c.RWMutex(u.name).ForceUnlock(rctx)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("force-unlock %s %q: %w", k.title(), u.name, err)
		}
		if ok {
			fmt.Fprintf(u.out, "force-unlocked %s %s (was %s)\n", k.title(), strconv.Quote(u.name), heldBy(k))
		} else {
			fmt.Fprintf(u.out, "%s %s was released meanwhile: nothing to unlock\n", k.title(), strconv.Quote(u.name))
		}
	}
	fmt.Fprintln(u.out, "the holders' leases report ErrForceUnlocked: within milliseconds for Clients that learn of changes to their keys, at their next renewal otherwise")
	return nil
}

// kindName is the --kind and JSON name of k.
func kindName(k kind) string {
	switch k.(type) {
	case *mutexView:
		return "mutex"
	case *fairView:
		return "fair"
	case *rwView:
		return "rw"
	case *semaphoreView:
		return "semaphore"
	case *latchView:
		return "latch"
	case *redissonView:
		return "redisson"
	case *redissonRWView:
		return "redisson-rw"
	case *redissonSemView:
		return "redisson-semaphore"
	case *redissonPSemView:
		return "redisson-permit-expirable-semaphore"
	case *redissonLatchView:
		return "redisson-latch"
	}
	return ""
}

// held reports whether k is a lock somebody holds.
func held(k kind) bool {
	switch v := k.(type) {
	case *mutexView:
		return v.Holder != nil
	case *fairView:
		return v.Holder != nil
	case *rwView:
		return v.Writer != nil || v.Readers > 0
	}
	return false
}

// heldBy says who held k, with the token of a lone holder.
func heldBy(k kind) string {
	var h *holderView
	switch v := k.(type) {
	case *mutexView:
		h = v.Holder
	case *fairView:
		h = v.Holder
	case *rwView:
		if v.Writer == nil {
			return "held by " + plural(v.Readers, "reader")
		}
		h = v.Writer
		if v.Readers > 0 {
			return fmt.Sprintf("write-held by %s, token %d, and %s", h.who(), h.Token, plural(v.Readers, "reader"))
		}
		return fmt.Sprintf("write-held by %s, token %d", h.who(), h.Token)
	}
	if h == nil { // taken between the look and the unlock
		return "held"
	}
	return fmt.Sprintf("held by %s, token %d", h.who(), h.Token)
}

// confirm writes question to out and reads the answer, a line, from in:
// "y" or "yes" in any case is a yes, anything else (an empty line, the end
// of input) a no. It returns ctx's error if ctx ends first.
func confirm(ctx context.Context, in io.Reader, out io.Writer, question string) (bool, error) {
	fmt.Fprint(out, question)
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(in).ReadString('\n')
		answer <- line
	}()
	select {
	case <-ctx.Done():
		fmt.Fprintln(out)
		return false, ctx.Err()
	case line := <-answer:
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return true, nil
		}
		return false, nil
	}
}
