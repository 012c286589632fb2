// Package engine is the seam between package redisync and the packages of
// this module that build locks of another layout on its Client (package
// redisson): the root fills Hooks in an init, and those packages reach the
// Client's machinery through them alone. Nothing of it is exported by the
// root, and nothing outside this module can import it.
//
// A lock of another layout needs from the Client what a lock of the
// Client's own needs, and no more. The hooks, one per concept:
//
//   - Client: its view of a Client: the connection, the logger, the
//     watchdog lease, fresh owner ids, the checks every handle makes, and
//     the running of an undo that must outlive its caller;
//   - Acquire: the three forms of acquiring (Lock, TryLock, Acquire),
//     which check the handle, give the call its grace, and count a
//     background acquisition for the Client's Close;
//   - Wait: an acquisition with a script and a wait: attempts, waiting in
//     between for a message on the lock's channel, the end of the
//     holder's lease or the Client's presence pass, which reads the lock
//     for every waiter of the channel whatever messages were lost;
//   - Run: a script that may take something, whose reply may come late
//     (it is undone once its caller gave up on it), and the Lease of what
//     it took (a Grant), of a Kind whose scripts the watchdog runs to
//     renew it, the Client runs to release it on Close, and whose Unlock
//     the Client calls with "release every hold" decided from the
//     ownership's leases and the re-entries on their way; a re-entry is
//     counted on its parent's ownership from the script's start until its
//     Lease is made, or never will be;
//   - Lease: what a Lease holds, the Lease named or the live one a
//     context carries for a lock (the parent of a re-entry);
//   - Err: the wrapping of Redis errors as the root's.
//
// That is enough because every Redisson kind is one of these shapes: a
// script takes a lock or permits or reads a count, a miss waits on a
// channel (and a presence probe), and what was taken is held by a Lease
// that the watchdog renews and Unlock gives back. State the Client keeps
// (the ownership's leases, the re-entries on their way, the shortest
// expiry other holders gave a shared key) stays behind the seam: the
// kinds see it only as the decision it leads to, so that it is checked
// against Redis where it is used, in the root, and nowhere else.
//
// Six hooks in all, and three more for tests (TestHooks: the waiters of a
// channel, a stalled presence pass, the subscription linger). The Client
// and Lease types cross the seam as any (a *redisync.Client, a
// *redisync.Lease): this package cannot name them, since the root imports
// it.
package engine

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"io/fs"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Script is a Lua script run as EVALSHA, falling back to EVAL when the
// server does not know it yet.
type Script struct {
	Lua *rueidis.Lua // runs it
	Src string       // its source, sent with EVAL
	SHA string       // its SHA-1, sent with EVALSHA
}

// Source joins the named files of dir/ in fsys (NAME.lua each), in
// order: a script's source. It panics on a missing file: the files are
// embedded, so only a misspelled name fails.
func Source(fsys fs.FS, dir string, files ...string) string {
	var src []byte
	for _, f := range files {
		b, err := fs.ReadFile(fsys, dir+"/"+f+".lua")
		if err != nil {
			panic(err)
		}
		src = append(src, b...)
	}
	return string(src)
}

// NewScript makes the Script of src.
func NewScript(src string) Script {
	sum := sha1.Sum([]byte(src))
	return Script{Lua: rueidis.NewLuaScript(src), Src: src, SHA: hex.EncodeToString(sum[:])}
}

// Exec runs the script once on rc.
func (s Script) Exec(ctx context.Context, rc rueidis.Client, keys, args []string) rueidis.RedisResult {
	return s.Lua.Exec(ctx, rc, keys, args)
}

// Client is what a lock of another layout reads of a *redisync.Client.
type Client struct {
	C             any            // the *redisync.Client itself, to hand back to the hooks
	RC            rueidis.Client // its connection
	Log           *slog.Logger   // its logger
	Cluster       bool           // whether it is connected to a Cluster
	WatchdogLease time.Duration  // its watchdog lease (WithWatchdogLease)
	// NewOwner returns a fresh owner id: the Client's ID, ':', a number.
	NewOwner func() string
	// Check checks what every method of a handle checks of the Client
	// and ctx (what names the handle's type in errors): a nil ctx, a
	// closed Client.
	Check func(what string, ctx context.Context) error
	// Cleanup runs f, an undo of what an acquisition that ends without
	// its lease may have taken, with a detached context; it waits for it
	// until the call's grace passed at most, and Close waits for the rest.
	Cleanup func(ctx context.Context, f func(context.Context))
	// Detached returns a context for work that must finish though the
	// caller's ctx ended, bounded by the Client's cleanup timeout.
	Detached func(ctx context.Context) (context.Context, context.CancelFunc)
	// PublishedOneWay counts, in the Client's Metrics, an operation of the
	// named lock that may publish by one kind of pub/sub alone on servers
	// that have both (see redisync.Metrics.PublishedOneWay).
	PublishedOneWay func(name string)
}

// Form is one of the three forms of acquiring of a lock handle.
type Form int

const (
	// Block waits as long as ctx allows (a handle's Lock).
	Block Form = iota
	// Try makes a single attempt (TryLock).
	Try
	// Background waits on a goroutine of its own and delivers the Lease
	// on a channel (Acquire).
	Background
)

// Handle is one way of acquiring: a lock handle's method. Check reports
// why it cannot acquire with ctx (bad input, a closed Client); Client is
// the *redisync.Client it runs on, asked only once Check passed; Acquire
// runs one acquisition, a single attempt if try.
type Handle struct {
	Check   func(ctx context.Context) error                  // why it cannot acquire
	Client  func() any                                       // its *redisync.Client
	Acquire func(ctx context.Context, try bool) (any, error) // one acquisition: a *redisync.Lease
}

// Wait is one acquisition with a script and a wait.
type Wait struct {
	C       any    // the *redisync.Client it runs on
	Channel string // the channel its releases are published on
	// Classic and Sharded tell which kinds of pub/sub to listen on.
	Classic, Sharded bool
	// Attempt runs the acquire script once: the *redisync.Lease, or how
	// long the thing stays taken at most (zero or negative: unknown).
	Attempt func(ctx context.Context) (any, time.Duration, error)
	// Undo releases what an attempt whose outcome is unknown may have
	// taken; it gets a detached context. Nil: nothing to undo.
	Undo func(ctx context.Context)
	// Busy is a single attempt's error when the thing is taken.
	Busy error
	// Probe is what the Client's presence pass reads, once per pass, for
	// the waiters of Channel: they look again when it reads a change.
	Probe func(rc rueidis.Client) rueidis.Completed
	// Primitive and Name label a wait that the fallback timer ended, and
	// name the wait in the error of one that its ctx ended.
	Primitive, Name string
	// Holder, when set, tells who held the thing at the last attempt that
	// found it taken ("" when it did not see): the error of a wait that its
	// ctx ended names it.
	Holder func() string
}

// Keys are the Redis names of one lock: the hash, its channel, and the
// queue and timeouts of a fair lock.
type Keys struct {
	Lock    string // the lock's hash: the key the watchdog renews
	Channel string // its unlock channel
	Queue   string // a fair lock's queue
	Waiters string // a fair lock's waiters' timeouts
}

// Holder is what a Kind's functions see of one ownership.
type Holder struct {
	C     any            // its *redisync.Client
	RC    rueidis.Client // that Client's connection
	Name  string         // the lock's name
	Key   string         // the key the watchdog renews
	Keys  Keys           // the lock's keys
	Owner string         // its owner id, the field it holds by
	Lease time.Duration  // its lease
}

// State is what an unlock found.
type State int

const (
	// NotHeld: the ownership was gone.
	NotHeld State = iota
	// StillHeld: holds of the ownership are left.
	StillHeld
	// Freed: the lock (or permits) was given back.
	Freed
)

// Kind is a kind of Lease: what its watchdog, its Client's Close and its
// Unlock run.
type Kind struct {
	// Primitive names the kind in metrics.
	Primitive string
	// Renew renews (or, with a lease of "0", checks) a batch of holders
	// of one slot: KEYS[i] a holder's key, ARGV[2i-1] its owner,
	// ARGV[2i] its lease in ms; it answers per key 1 (held), 0 (gone) or
	// 2 (another owner's), or, for a key shared with holders that set its
	// expiry to a lease of their own, -n: held, and found with n ms to
	// live, less than half its holder's lease (the holder's renewals alone
	// leave it about two thirds, so another holder set it). From then on
	// the holder is renewed at a third of the shortest n found, and its
	// deadline counts from it.
	Renew Script
	// Release, with the keys and args ReleaseAll gives, frees everything
	// a holder holds, when its Client closes.
	Release    Script
	ReleaseAll func(h Holder) rueidis.LuaExec // Release's keys and args for h
	// Unlock releases one hold (hold "" for every one), or every hold
	// when all: the Client decides all from the ownership's leases and
	// the re-entries on their way. answered is false when the outcome is
	// unknown (no reply).
	Unlock func(ctx context.Context, h Holder, hold string, all bool) (s State, answered bool, err error)
	// Tracked marks a lock hash with the owner as a field of its own,
	// held by one ownership at a time: the Client can hear it change.
	Tracked bool
	// Counted marks kinds whose Unlock is told all (a lock's holds are
	// counted in Redis); otherwise all is always true.
	Counted bool
}

// Grant is the ownership a script took, to be made a Lease (see
// Hooks.Run): on the Client the script ran on, a re-entry of the parent
// the script ran with.
type Grant struct {
	Kind  *Kind         // its kind
	Name  string        // the lock's name
	Keys  Keys          // the lock's keys
	Key   string        // the key the watchdog renews
	Owner string        // the owner id it holds by
	Hold  string        // the Lease's hold, handed to Kind.Unlock
	Token int64         // the Lease's fencing token (0: none)
	Lease time.Duration // the lease the key got
	// Watchdog: renewed by the watchdog; otherwise a fixed lease.
	Watchdog bool
	// Sent is when the command that took it was sent.
	Sent time.Time
	// Shared, when not 0, is how long the key had to live when the
	// script took it, shorter than half the lease: other holders of the
	// shared key set its expiry to their own shorter lease, and the
	// watchdog renews it as a renewal's answer -n says (see Kind.Renew).
	Shared time.Duration
}

// LeaseInfo is what a Lease holds.
type LeaseInfo struct {
	C        any           // its *redisync.Client
	Kind     *Kind         // nil for the Client's own kinds
	Name     string        // the lock's name
	Owner    string        // its ownership's owner id
	Lease    time.Duration // its lease
	Watchdog bool          // renewed by the watchdog, not a fixed lease
	Live     bool          // its ownership neither released nor lost
}

// Hooks are the functions the root fills in an init.
type Hooks struct {
	// Client returns the view of c (a *redisync.Client), or
	// ErrInvalidArgument for a nil or zero Client.
	Client func(c any) (Client, error)
	// Acquire runs h in the given form: for Block and Try, the Lease (a
	// *redisync.Lease) or the error; for Background, a
	// <-chan *redisync.Lease, and a nil error.
	Acquire func(ctx context.Context, h Handle, form Form) (any, error)
	// Wait attempts, and unless try, waits between attempts, until it
	// acquires or ctx ends: connection errors retried with backoff, Redis
	// errors returned at once.
	Wait func(ctx context.Context, w Wait, try bool) (any, error)
	// Run runs s on c, a script that may take something: undo undoes it
	// once the caller gave up on it. grant makes the Lease of what the
	// script took, or with nil tells that it took nothing; only its first
	// call counts (later ones return nil, nil). With a parent Lease the
	// script is a re-entry: counted on the parent's ownership until grant
	// is called (or, given up on, until its reply came), and refused with
	// ErrNotHeld while the parent is being released; a re-entry the
	// script refused ({-1, why}) is the parent's loss, an error.
	Run func(ctx context.Context, c any, parent any, s Script, keys, args []string, undo func(context.Context)) (res []rueidis.RedisMessage, grant func(g *Grant) (any, error), err error)
	// Lease returns the Lease l (a *redisync.Lease), or, when l is nil,
	// the live Lease ctx carries for the lock key of c (the parent of a
	// re-entry), and what it holds; ok is false when there is none, or
	// its acquisition failed.
	Lease func(ctx context.Context, c any, key string, l any) (lease any, info LeaseInfo, ok bool)
	// Err wraps an error from Redis or the connection as the root's own
	// errors are wrapped (ErrWrongType, ErrClosed marked), op naming the
	// operation.
	Err func(op string, err error) error
}

// HasHashTag reports whether Redis Cluster would hash s by a tag: a '{'
// followed, later, by a '}' with at least one byte between them.
func HasHashTag(s string) bool {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return false
	}
	j := strings.IndexByte(s[i+1:], '}')
	return j > 0
}

// H are the hooks, filled by package redisync's init.
var H Hooks

// TestHooks let the tests of the packages built on the seam watch the
// Client's notifier and hold its presence pass up, as the root's own tests
// do; no code of the library calls them.
type TestHooks struct {
	// Waiters counts the waiters of c (a *redisync.Client) on channel,
	// once every subscription of c to it has taken effect (0 before).
	Waiters func(c any, channel string) int
	// StallPresence holds c's presence passes up until resume is called.
	StallPresence func(c any) (resume func())
	// SubscriptionLinger is how long a subscription nobody waits on
	// lingers before it ends.
	SubscriptionLinger time.Duration
}

// T are the test hooks, filled by package redisync's init.
var T TestHooks
