package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

var watchCommand = &command{
	name:     "watch",
	synopsis: "[--interval D] [--count N] [--redisson KIND] [connection flags] NAME...",
	summary:  "a live view of locks: who holds them, their TTL and their waiters",
	help: `
Shows the primitives named NAME... (see 'redisync inspect') as a table,
refreshed every --interval until Ctrl-C, or --count refreshes. One line per
primitive in use: its holder's client id (and name, see 'redisync
inspect'), holds, remaining lease and fencing token, and who waits. A name
with nothing in use shows "free". --redisson reads the string NAME as a
Redisson object, as 'redisync inspect --redisson' does.

On a terminal the screen is redrawn in place. Otherwise (a pipe, a file)
every refresh is a block of its own that starts with a line
"--- <time> ---", for logs and scripts.

A refresh that fails (Redis unreachable, a slow reply) shows the error in
its block and the next one tries again.` + connHelp,
	flags: func(fs *flag.FlagSet) runFunc {
		var conn connFlags
		conn.register(fs)
		interval := fs.Duration("interval", time.Second, "`duration` between refreshes")
		count := fs.Int("count", 0, "stop after `N` refreshes (0: run until interrupted)")
		as := fs.String("redisson", "", redissonAsFlag)
		return func(ctx context.Context, args []string, stdout io.Writer) error {
			switch {
			case len(args) == 0:
				return usageErrorf("missing the lock NAME (one or more)")
			case *interval < 10*time.Millisecond:
				return usageErrorf("--interval must be at least 10ms, got %v", *interval)
			case *count < 0:
				return usageErrorf("--count must not be negative, got %d", *count)
			}
			if err := checkRedissonAs(*as); err != nil {
				return err
			}
			for _, n := range args {
				if n == "" {
					return usageErrorf("a lock name is empty")
				}
			}
			c, err := conn.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			w := &watcher{c: c, conn: &conn, names: args, interval: *interval, as: *as, out: stdout, tty: isTerminal(stdout)}
			return w.run(ctx, *count)
		}
	},
}

type watcher struct {
	c        *client
	conn     *connFlags
	names    []string
	interval time.Duration
	as       string // --redisson
	out      io.Writer
	tty      bool
}

// run refreshes until ctx ends (an interrupt: not an error) or after count
// refreshes (0: no limit).
func (w *watcher) run(ctx context.Context, count int) error {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for i := 1; ; i++ {
		w.refresh(ctx)
		if count > 0 && i >= count {
			return nil
		}
		select {
		case <-ctx.Done():
			if w.tty {
				fmt.Fprintln(w.out)
			}
			return nil
		case <-t.C:
		}
	}
}

// watchRow is one line of the table.
type watchRow struct {
	holder, holds, ttl, token, waiting string
}

func (h *holderView) row() watchRow {
	return watchRow{h.who(), strconv.Itoa(h.Holds), formatTTL(h.TTLms), strconv.FormatUint(h.Token, 10), "-"}
}

func (v *queuedView) row() watchRow {
	r := watchRow{holder: "(none)", holds: "-", ttl: "-", token: "-"}
	if v.Holder != nil {
		r = v.Holder.row()
	}
	r.waiting = strconv.Itoa(v.Waiters)
	return r
}

func (v *rwView) row() watchRow {
	var r watchRow
	switch {
	case v.Writer != nil:
		r = v.Writer.row()
		r.holder = "writer " + r.holder
		if v.Readers > 0 { // a downgrade in progress
			r.holder += " + " + plural(v.Readers, "reader")
		}
	default:
		r = watchRow{holder: plural(v.Readers, "reader"), holds: "-", ttl: formatTTL(v.ReadTTLms), token: "-"}
		if v.Readers == 0 {
			r.ttl = "-"
		}
	}
	r.waiting = plural(v.WritersWaiting, "writer")
	return r
}

func (v *semaphoreView) row() watchRow {
	r := watchRow{
		holder:  fmt.Sprintf("%s, %d/%d permits", plural(len(v.Holders), "holder"), v.Acquired, v.Size),
		holds:   "-",
		ttl:     "-",
		token:   "-",
		waiting: strconv.Itoa(v.Waiters),
	}
	if len(v.Holders) > 0 {
		r.ttl = formatTTL(v.Holders[0].TTLms) // the soonest to end
	}
	if v.Waiters > 0 {
		r.waiting += " (" + plural(v.WaitingPermits, "permit") + ")"
	}
	return r
}

func (v *latchView) row() watchRow {
	return watchRow{holder: "count " + strconv.Itoa(v.Count), holds: "-", ttl: "-", token: "-", waiting: "-"}
}

// refresh inspects every name and prints one block.
func (w *watcher) refresh(ctx context.Context) {
	var b strings.Builder
	now := time.Now()
	if w.tty {
		b.WriteString("\x1b[H\x1b[2J") // home, clear screen
		fmt.Fprintf(&b, "redisync watch  every %v  %s  (Ctrl-C to quit)\n\n", w.interval, now.Format("15:04:05"))
	} else {
		fmt.Fprintf(&b, "--- %s ---\n", now.Format(time.RFC3339Nano))
	}
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tHOLDER\tHOLDS\tTTL\tTOKEN\tWAITING")
	var errs []string
	for _, name := range w.names {
		rctx, cancel := w.conn.request(ctx)
		snap, err := inspect(rctx, w.c, name, w.as)
		cancel()
		switch {
		case ctx.Err() != nil:
			return // interrupted: print nothing half-done
		case err != nil:
			fmt.Fprintf(tw, "%s\t?\t(error)\t\t\t\t\n", name)
			errs = append(errs, fmt.Sprintf("error: %s: %s", name, errorLine(err)))
		case snap.Free:
			fmt.Fprintf(tw, "%s\t-\tfree\t\t\t\t\n", name)
		default:
			for _, k := range snap.Kinds {
				r := k.row()
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, k.title(), r.holder, r.holds, r.ttl, r.token, r.waiting)
			}
		}
	}
	tw.Flush()
	for _, line := range strings.Split(strings.TrimSuffix(table.String(), "\n"), "\n") {
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	for _, e := range errs {
		b.WriteString(e + "\n")
	}
	if !w.tty {
		b.WriteString("\n")
	}
	io.WriteString(w.out, b.String())
}

// isTerminal reports whether w is a terminal.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && isatty(f.Fd())
}
