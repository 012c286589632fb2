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

	"github.com/redisync/redisync/redisson"
)

var unlockCommand = &command{
	name:     "unlock",
	synopsis: "--force [--kind mutex|fair|rw|redisson|redisson-rw] [--yes] [connection flags] NAME",
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
broken: the Mutex, the FairMutex (its queue stays), the RWMutex (the
writer and every read share), and the locks in Redisson's layouts, as
Java's forceUnlock breaks them: an RLock, RFencedLock or RFairLock
(redisson; a fair lock's waiters are told in queue order) and an
RReadWriteLock (redisson-rw, its writer and every reader). The Redisson
unlock message is published both ways (PUBLISH and SPUBLISH on a Cluster),
so that Java and Node waiters subscribed either way wake. Semaphores and
latches are not locks of one holder and are left alone.

The command lists what it is about to break and asks for confirmation on
the terminal; --yes skips the question, and is required when stdin is not
a terminal. A declined confirmation exits with status 1. A name with
nothing held prints so and exits with status 0; a name under which
something is held that unlock may not break (a semaphore, a latch, or a
lock of another kind than --kind) exits with status 1 and says what is
there.` + connHelp,
	flags: func(fs *flag.FlagSet) runFunc {
		var conn connFlags
		conn.register(fs)
		force := fs.Bool("force", false, "required: break the lock although its holder may be alive")
		kindFlag := fs.String("kind", "", "break only the lock of this `kind`: mutex, fair, rw, redisson or redisson-rw (default: every kind held)")
		yes := fs.Bool("yes", false, "do not ask for confirmation")
		return func(ctx context.Context, args []string, stdout io.Writer) error {
			name, err := oneName(args)
			if err != nil {
				return err
			}
			if _, ok := unlockKinds[*kindFlag]; !ok && *kindFlag != "" {
				return usageErrorf("--kind must be mutex, fair, rw, redisson or redisson-rw, got %q", *kindFlag)
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
		if len(snap.Kinds) == 0 {
			what := "nothing"
			if u.kind != "" {
				what = "no " + unlockKinds[u.kind]
			}
			fmt.Fprintf(u.out, "%s: nothing to unlock (%s held)\n", u.name, what)
			return nil
		}
		// Something is there that this unlock may not break: say what,
		// and fail, so that a script does not take the lock for free.
		what := "no mutex, fair mutex, rw mutex, redisson lock or redisson read-write lock"
		if u.kind != "" {
			what = "no " + unlockKinds[u.kind]
		}
		there := make([]string, len(snap.Kinds))
		for i, k := range snap.Kinds {
			there[i] = describe(k)
		}
		return fmt.Errorf("%s: nothing to unlock (%s held), but the name holds: %s", u.name, what, strings.Join(there, "; "))
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
		case "redisson":
			// A fair lock's waiters wait in its queue, each on a channel of
			// its own: its ForceUnlock tells the queue's head.
			if k.(*redissonView).Waiters > 0 {
				ok, err = u.redisson().FairLock(u.name).ForceUnlock(rctx)
			} else {
				ok, err = u.redisson().Lock(u.name).ForceUnlock(rctx)
			}
		case "redisson-rw":
			ok, err = u.redisson().ReadWriteLock(u.name).ForceUnlock(rctx)
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
	fmt.Fprintln(u.out, "the holders' leases report ErrForceUnlocked (a Redisson lock's Go holders: ErrExpired; its Java holders learn it at their next renewal or unlock): within milliseconds for Clients that learn of changes to their keys, at their next renewal otherwise")
	return nil
}

// unlockKinds are the kinds unlock breaks, by --kind, as its messages name
// them.
var unlockKinds = map[string]string{
	"mutex": "mutex", "fair": "fair mutex", "rw": "rw mutex",
	"redisson": "redisson lock", "redisson-rw": "redisson read-write lock",
}

// redisson is the Redisson client of the unlock: it publishes Redisson's
// unlock message both ways, so that waiters subscribed either way (Java on
// sharded or classic pub/sub, Node on classic) wake.
func (u *unlocker) redisson() *redisson.Client {
	return redisson.New(u.c.Client, redisson.WithPubSub(redisson.PubSubBoth))
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
	case *redissonView:
		return len(v.Holders) > 0
	case *redissonRWView:
		return v.Mode != ""
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
	case *redissonView, *redissonRWView:
		return redissonHeldBy(v)
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
