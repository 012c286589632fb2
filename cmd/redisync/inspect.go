package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/redisson"
)

var inspectCommand = &command{
	name:     "inspect",
	synopsis: "[--json] [--redisson KIND] [connection flags] NAME",
	summary:  "show who holds a lock, for how long, and who waits for it",
	help: `
Shows every primitive named NAME that is in use: a Mutex, FairMutex or
RWMutex that is held or waited for, a Semaphore with a size or holders, a
Latch with a count, a lock in Redisson's RLock layout (the hash NAME,
written by Java's Redisson, node-redisson or Client.Lock) that is
held or has a fair queue, a lock in Redisson's RReadWriteLock layout that
is held, and a Redisson RPermitExpirableSemaphore with permits acquired
(the zset {NAME}:timeout of permit ids): its permits available, and each
permit acquired with its id and what is left of its lease. Primitives of
different kinds with the same name are unrelated; each is shown on its own.

Redisson keeps an RSemaphore's permits, an RCountDownLatch's count and an
RPermitExpirableSemaphore's available permits in the string NAME, a number
that nothing tells from another program's counter. inspect reads it as one
of them only when told which: --redisson semaphore (the permits
available), --redisson latch (the count, shown while it is not zero) or
--redisson permit-expirable-semaphore (shown with no permit acquired
too). A
NAME that holds something else is then an error. Without --redisson, a
string NAME holding a number is mentioned in a note.

For each holder: its owner id (the holding Client's ID, as returned by
Client.ID, a colon and a sequence number), the client id alone, followed by
the Client's name in parentheses when it was made with
redisync.WithClientName (found in CLIENT LIST, which the Redis user must be
allowed to run), the number of holds (re-entries count), the remaining
lease and the fencing token. A
FairMutex shows the places in its queue, an RWMutex its read shares and
waiting writers, a Semaphore its size, holders and waiters, a Latch its
count. Each also lists its Redis keys (keys:), with --prefix and the
name's Cluster hash tag as the library writes them: {NAME} for a plain
name, :NAME for a name with a hash tag of its own, {#hhhh}:NAME for other
names with braces; some exist only while someone waits. The keys of
Redisson's layouts are Redisson's names, without --prefix. A name with none
of them prints "NAME: free (no lock of any kind)".

--json prints one JSON object: {"name", "time", "free", "kinds": [...]},
one element per primitive in use with a "kind" of mutex, fair, rw,
semaphore, latch, redisson, redisson-rw, redisson-semaphore,
redisson-permit-expirable-semaphore or redisson-latch, and its Redis
"keys", and a "note" when there is one. Holders have a
"client_id" and, when known, a "client_name". Durations are in
milliseconds; a ttl_ms of -1 means the key
has no expiry.

Inspecting a Semaphore drops its holders whose lease is over, as every
operation on it does.` + connHelp,
	flags: func(fs *flag.FlagSet) runFunc {
		var conn connFlags
		conn.register(fs)
		asJSON := fs.Bool("json", false, "print one JSON object instead of text")
		as := fs.String("redisson", "", redissonAsFlag)
		return func(ctx context.Context, args []string, stdout io.Writer) error {
			name, err := oneName(args)
			if err != nil {
				return err
			}
			if err := checkRedissonAs(*as); err != nil {
				return err
			}
			c, err := conn.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			rctx, cancel := conn.request(ctx)
			defer cancel()
			snap, err := inspect(rctx, c, name, *as)
			if err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(stdout, snap)
			}
			snap.writeText(stdout)
			return nil
		}
	},
}

// snapshot is what inspect found under one name.
type snapshot struct {
	Name  string    `json:"name"`
	Time  time.Time `json:"time"`
	Free  bool      `json:"free"`
	Kinds []kind    `json:"kinds"`
	// Note says what inspect could not tell: a string NAME holding a
	// number that --redisson was not given for.
	Note string `json:"note,omitempty"`
}

// kind is one primitive in use: *mutexView, *fairView, *rwView,
// *semaphoreView or *latchView.
type kind interface {
	// title names the kind in text: "mutex", "fair mutex"...
	title() string
	// fields are its text lines, in order.
	fields() []field
	// row is its one-line summary, for watch.
	row() watchRow
	// clients are its holders' Clients.
	clients() []*clientRef
	// keyNames are its Redis keys.
	keyNames() []string
}

// keyed is the Redis keys of one primitive, which every view embeds.
type keyed struct {
	Keys []string `json:"keys"`
}

func (k *keyed) keyNames() []string { return k.Keys }

type field struct{ key, value string }

// clientRef is the Client of a holder: its id, and its name if it has one
// (redisync.WithClientName).
type clientRef struct {
	ClientID   string `json:"client_id"`
	ClientName string `json:"client_name,omitempty"`
}

// who is the id, and the name in parentheses.
func (r *clientRef) who() string {
	if r.ClientName == "" {
		return r.ClientID
	}
	return r.ClientID + " (" + r.ClientName + ")"
}

// holderView is one holder of a lock.
type holderView struct {
	Owner string `json:"owner"`
	clientRef
	Holds int    `json:"holds"`
	TTLms int64  `json:"ttl_ms"`
	Token uint64 `json:"token"`
}

func newHolder(st redisync.MutexState) *holderView {
	return &holderView{Owner: st.Owner, clientRef: clientRef{ClientID: st.ClientID()}, Holds: st.Holds, TTLms: ttlMillis(st.TTL), Token: st.Token}
}

// holderRefs is the clientRef of h, if any.
func holderRefs(h *holderView) []*clientRef {
	if h == nil {
		return nil
	}
	return []*clientRef{&h.clientRef}
}

// fields describes the holder in role, or says there is none.
func (h *holderView) fields(role string) []field {
	if h == nil {
		return []field{{role, "none"}}
	}
	return []field{
		{role, h.Owner},
		{"client", h.who()},
		{"holds", strconv.Itoa(h.Holds)},
		{"ttl", formatTTL(h.TTLms)},
		{"token", strconv.FormatUint(h.Token, 10)},
	}
}

// queuedView is a lock with a queue of waiters: a Mutex or a FairMutex.
type queuedView struct {
	Kind    string      `json:"kind"`   // "mutex" or "fair"
	Holder  *holderView `json:"holder"` // nil when free
	Waiters int         `json:"waiters"`
	keyed
}

type mutexView struct{ queuedView }

func (v *mutexView) title() string { return "mutex" }

type fairView struct{ queuedView }

func (v *fairView) title() string { return "fair mutex" }

func newQueued(kind string, st redisync.MutexState) queuedView {
	v := queuedView{Kind: kind, Waiters: st.Waiters}
	if st.Locked {
		v.Holder = newHolder(st)
	}
	return v
}

func (v *queuedView) clients() []*clientRef { return holderRefs(v.Holder) }

func (v *queuedView) fields() []field {
	return append(v.Holder.fields("holder"), field{"waiters", strconv.Itoa(v.Waiters) + " in the queue"})
}

type rwView struct {
	Kind           string      `json:"kind"`   // "rw"
	Writer         *holderView `json:"writer"` // nil without a writer
	Readers        int         `json:"readers"`
	ReadTTLms      int64       `json:"read_ttl_ms"`
	WritersWaiting int         `json:"writers_waiting"`
	keyed
}

func (v *rwView) title() string { return "rw mutex" }

func (v *rwView) clients() []*clientRef { return holderRefs(v.Writer) }

func (v *rwView) fields() []field {
	readers := strconv.Itoa(v.Readers)
	if v.Readers > 0 {
		readers += " (last share ends in " + formatTTL(v.ReadTTLms) + ")"
	}
	return append(v.Writer.fields("writer"),
		field{"readers", readers},
		field{"writers waiting", strconv.Itoa(v.WritersWaiting)})
}

type semHolderView struct {
	clientRef
	Permits int   `json:"permits"`
	TTLms   int64 `json:"ttl_ms"`
}

type semaphoreView struct {
	Kind           string          `json:"kind"` // "semaphore"
	Size           int             `json:"size"`
	Acquired       int             `json:"acquired"`
	Available      int             `json:"available"`
	Holders        []semHolderView `json:"holders"`
	Waiters        int             `json:"waiters"`
	WaitingPermits int             `json:"waiting_permits"`
	keyed
}

func (v *semaphoreView) title() string { return "semaphore" }

func (v *semaphoreView) clients() []*clientRef {
	refs := make([]*clientRef, len(v.Holders))
	for i := range v.Holders {
		refs[i] = &v.Holders[i].clientRef
	}
	return refs
}

func (v *semaphoreView) fields() []field {
	fs := []field{
		{"size", strconv.Itoa(v.Size)},
		{"acquired", strconv.Itoa(v.Acquired)},
		{"available", strconv.Itoa(v.Available)},
		{"holders", strconv.Itoa(len(v.Holders))},
	}
	for _, h := range v.Holders {
		fs = append(fs, field{"", fmt.Sprintf("%s  %s  ttl %s", h.who(), plural(h.Permits, "permit"), formatTTL(h.TTLms))})
	}
	waiters := strconv.Itoa(v.Waiters)
	if v.Waiters > 0 {
		waiters += " (asking for " + plural(v.WaitingPermits, "permit") + ")"
	}
	return append(fs, field{"waiters", waiters})
}

type latchView struct {
	Kind  string `json:"kind"` // "latch"
	Count int    `json:"count"`
	keyed
}

func (v *latchView) title() string { return "latch" }

func (v *latchView) clients() []*clientRef { return nil }

func (v *latchView) fields() []field {
	return []field{{"count", strconv.Itoa(v.Count) + " (closed: waiters wait until it is 0)"}}
}

// inspect reads every kind of primitive named name, concurrently, and
// returns those in use, with the names of their holders' Clients. as (the
// value of --redisson, or "") names the Redisson object the string NAME
// is read as.
func inspect(ctx context.Context, c *client, name, as string) (*snapshot, error) {
	var plain redisson.SemaphoreState
	looks := append(slices.Clone(lookups),
		func(ctx context.Context, c *client, name string) (kind, error) {
			return lookRedissonPSem(ctx, c, name, as == asPSem)
		},
		func(ctx context.Context, c *client, name string) (kind, error) {
			return lookRedissonString(ctx, c, name, as, &plain)
		})
	found := make([]kind, len(looks))
	errs := make([]error, len(looks))
	var wg sync.WaitGroup
	for i, look := range looks {
		wg.Go(func() { found[i], errs[i] = look(ctx, c, name) })
	}
	wg.Wait()

	snap := &snapshot{Name: name, Time: time.Now(), Kinds: []kind{}}
	explained := false
	for i, k := range found {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if k != nil {
			snap.Kinds = append(snap.Kinds, k)
		}
		if _, ok := k.(*redissonPSemView); ok {
			explained = true
		}
	}
	if plain.Exists && !explained {
		snap.Note = fmt.Sprintf("the string %s holds %d: a Redisson semaphore, permit-expirable semaphore or count-down latch keeps its number there, and so may any program; --redisson KIND reads it as one", strconv.Quote(name), plain.Available)
	}
	snap.Free = len(snap.Kinds) == 0
	c.nameHolders(ctx, snap)
	return snap, nil
}

// lookups read, each, one kind of lock that name may be: nil when that
// lock is free and nobody waits. A snapshot lists the kinds in this order,
// then the Redisson objects kept in strings (see inspect).
var lookups = []func(ctx context.Context, c *client, name string) (kind, error){
	lookMutex, lookFair, lookRW, lookSemaphore, lookLatch, lookRedisson, lookRedissonRW,
}

func lookMutex(ctx context.Context, c *client, name string) (kind, error) {
	st, err := c.Mutex(name).Inspect(ctx)
	if err != nil || (!st.Locked && st.Waiters == 0) {
		return nil, err
	}
	v := &mutexView{newQueued("mutex", st)}
	v.Keys = keysOf(c.prefix, "mutex", name)
	return v, nil
}

func lookFair(ctx context.Context, c *client, name string) (kind, error) {
	st, err := c.FairMutex(name).Inspect(ctx)
	if err != nil || (!st.Locked && st.Waiters == 0) {
		return nil, err
	}
	v := &fairView{newQueued("fair", st.MutexState)}
	v.Keys = keysOf(c.prefix, "fair", name)
	return v, nil
}

func lookRW(ctx context.Context, c *client, name string) (kind, error) {
	st, err := c.RWMutex(name).Inspect(ctx)
	if err != nil || (st.Free() && st.WritersWaiting == 0) {
		return nil, err
	}
	v := &rwView{Kind: "rw", Readers: st.Readers, ReadTTLms: st.ReadTTL.Milliseconds(), WritersWaiting: st.WritersWaiting,
		keyed: keyed{keysOf(c.prefix, "rw", name)}}
	if st.WriteLocked {
		v.Writer = &holderView{Owner: st.Writer, clientRef: clientRef{ClientID: st.WriterClientID()}, Holds: st.WriteHolds, TTLms: ttlMillis(st.WriteTTL), Token: st.Token}
	}
	return v, nil
}

func lookSemaphore(ctx context.Context, c *client, name string) (kind, error) {
	st, err := c.Semaphore(name).Inspect(ctx)
	if err != nil || (st.Size == 0 && st.Acquired == 0 && len(st.Holders) == 0 && st.Waiters == 0) {
		return nil, err
	}
	v := &semaphoreView{Kind: "semaphore", Size: st.Size, Acquired: st.Acquired, Available: st.Available,
		Holders: []semHolderView{}, Waiters: st.Waiters, WaitingPermits: st.WaitingPermits,
		keyed: keyed{keysOf(c.prefix, "semaphore", name)}}
	for _, h := range st.Holders {
		v.Holders = append(v.Holders, semHolderView{clientRef: clientRef{ClientID: h.ClientID()}, Permits: h.Permits, TTLms: ttlMillis(h.TTL)})
	}
	return v, nil
}

func lookLatch(ctx context.Context, c *client, name string) (kind, error) {
	n, err := c.Latch(name).Count(ctx)
	if err != nil || n == 0 {
		return nil, err
	}
	return &latchView{Kind: "latch", Count: n, keyed: keyed{keysOf(c.prefix, "latch", name)}}, nil
}

// writeText prints the snapshot as aligned "key: value" lines, one block
// per kind.
func (s *snapshot) writeText(w io.Writer) {
	if s.Free {
		fmt.Fprintf(w, "%s: free (no lock of any kind)\n", s.Name)
	}
	for i, k := range s.Kinds {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s %s\n", k.title(), strconv.Quote(s.Name))
		tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
		fields := k.fields()
		for i, key := range k.keyNames() {
			label := ""
			if i == 0 {
				label = "keys"
			}
			fields = append(fields, field{label, key})
		}
		for _, f := range fields {
			key := ""
			if f.key != "" {
				key = f.key + ":"
			}
			fmt.Fprintf(tw, "  %s\t%s\n", key, f.value)
		}
		tw.Flush()
	}
	if s.Note != "" {
		if !s.Free {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "note: %s\n", s.Note)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// ttlMillis is a remaining lease in milliseconds: -1 without expiry.
func ttlMillis(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}

// formatTTL formats milliseconds of lease for people.
func formatTTL(ms int64) string {
	if ms < 0 {
		return "no expiry"
	}
	d := time.Duration(ms) * time.Millisecond
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

func describeQueued(b *strings.Builder, v *queuedView) {
	if v.Holder != nil {
		fmt.Fprintf(b, " held by %s", v.Holder.who())
	}
	if v.Waiters > 0 {
		fmt.Fprintf(b, ", %d waiting", v.Waiters)
	}
}

// describe names what holds a kind, for the confirmation of unlock.
func describe(k kind) string {
	var b strings.Builder
	b.WriteString(k.title())
	switch v := k.(type) {
	case *mutexView:
		describeQueued(&b, &v.queuedView)
	case *fairView:
		describeQueued(&b, &v.queuedView)
	case *redissonView, *redissonRWView:
		if held(k) {
			b.WriteString(" " + redissonHeldBy(k))
		}
	case *rwView:
		var parts []string
		if v.Writer != nil {
			parts = append(parts, "write-held by "+v.Writer.who())
		}
		if v.Readers > 0 {
			parts = append(parts, plural(v.Readers, "reader"))
		}
		if len(parts) > 0 {
			b.WriteString(" " + strings.Join(parts, ", "))
		}
	}
	return b.String()
}
