package redisson

import (
	"context"
	"embed"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/internal/engine"
)

// Client is a redisync.Client seen as a Redisson client: it makes the
// handles of Redisson's objects (Lock, FencedLock, FairLock,
// ReadWriteLock, Semaphore, PermitExpirableSemaphore, CountDownLatch) and
// holds the settings they share, as Java's RedissonClient and its Config
// do. It is a cheap value: make one per redisync.Client and share it, from
// many goroutines. Its handles are held through the redisync.Client's
// machinery (its watchdog, its tracking, its Close), and their Leases are
// redisync Leases.
type Client struct {
	parent        *redisync.Client
	eng           engine.Client
	rc            rueidis.Client
	log           *slog.Logger
	cluster       bool
	watchdogLease time.Duration
	// defaults are the options New was given: every handle applies them
	// before its own.
	defaults []Option
	err      error
	// shards caches whether the servers have sharded pub/sub: 0 not known
	// yet, 1 no, 2 yes.
	shards atomic.Int32
	// narrow holds the names warnNarrow logged, narrowed counts them.
	narrow   sync.Map
	narrowed atomic.Int64
}

// New returns the Redisson client of c, with opts as the defaults of every
// handle it makes (a handle's own options override them). A nil or zero
// c, or an invalid option, is reported by every method of every handle,
// as redisync.ErrInvalidArgument; New itself never fails.
func New(c *redisync.Client, opts ...Option) *Client {
	r := &Client{parent: c, defaults: opts}
	r.eng, r.err = engine.H.Client(c)
	if r.err == nil {
		r.rc, r.log, r.cluster, r.watchdogLease = r.eng.RC, r.eng.Log, r.eng.Cluster, r.eng.WatchdogLease
		var cfg config
		for _, o := range opts {
			if o != nil {
				o(&cfg)
			}
		}
		r.err = cfg.bad
	}
	return r
}

// invalid reports a Client that cannot be used: nil, or made of a nil or
// zero redisync.Client, or with an invalid option.
func (c *Client) invalid() error {
	if c == nil {
		return fmt.Errorf("%w: nil redisson.Client", redisync.ErrInvalidArgument)
	}
	return c.err
}

func (c *Client) newOwner() string { return c.eng.NewOwner() }

// cleanup runs f, an undo of what an acquisition that ended without its
// lease may have taken, with a detached context (see engine.Client).
func (c *Client) cleanup(ctx context.Context, f func(context.Context)) { c.eng.Cleanup(ctx, f) }

// detached returns a context for work that must finish though ctx ended.
func (c *Client) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return c.eng.Detached(ctx)
}

// checkHandle checks what every method of a handle checks: the error its
// constructor found, that a Client made it, ctx, and that the Client is
// open.
func checkHandle(what string, c *Client, err error, ctx context.Context) error {
	switch {
	case err != nil:
		return err
	case c == nil:
		return fmt.Errorf("%w: %s not made by a redisson.Client", redisync.ErrInvalidArgument, what)
	}
	return c.eng.Check(what, ctx)
}

// handle is one way of acquiring: a handle's Lock, TryLock and Acquire
// run it through the Client's three forms of acquiring.
type handle interface {
	// check reports why the handle cannot acquire with ctx; the receiver
	// may be nil.
	check(ctx context.Context) error
	// acquire runs one acquisition: a single attempt if try.
	acquire(ctx context.Context, try bool) (*redisync.Lease, error)
	// client is the handle's Client, called only after check passed.
	client() *Client
}

func seam(h handle) engine.Handle {
	return engine.Handle{
		Check:   h.check,
		Client:  func() any { return h.client().parent },
		Acquire: func(ctx context.Context, try bool) (any, error) { return asAny(h.acquire(ctx, try)) },
	}
}

// lockHandle is Lock (try false) and TryLock (try true) of h.
func lockHandle(ctx context.Context, h handle, try bool) (*redisync.Lease, error) {
	form := engine.Block
	if try {
		form = engine.Try
	}
	return asLease(engine.H.Acquire(ctx, seam(h), form))
}

// acquireHandle is Acquire of h.
func acquireHandle(ctx context.Context, h handle) <-chan *redisync.Lease {
	ch, _ := engine.H.Acquire(ctx, seam(h), engine.Background)
	return ch.(<-chan *redisync.Lease)
}

// asLease is the Lease a hook returned.
func asLease(v any, err error) (*redisync.Lease, error) {
	l, _ := v.(*redisync.Lease)
	return l, err
}

// asAny is a Lease for a hook: nil, not a nil *Lease, when there is none.
func asAny(l *redisync.Lease, err error) (any, error) {
	if l == nil {
		return nil, err
	}
	return l, err
}

// wait runs w (see engine.Wait).
func (c *Client) wait(ctx context.Context, w engine.Wait, try bool) (*redisync.Lease, error) {
	w.C = c.parent
	return asLease(engine.H.Wait(ctx, w, try))
}

// grantFunc makes the Lease of what a script run took (nil: it took
// nothing); only its first call counts (see engine.Hooks.Run).
type grantFunc func(g *engine.Grant) (*redisync.Lease, error)

// run runs s, which may take something, as engine.Hooks.Run says: a
// re-entry of parent when parent is not nil. Call the grant it returns
// once the outcome is known, with what the script took or nil.
func (c *Client) run(ctx context.Context, parent *redisync.Lease, s engine.Script, keys, args []string, undo func(context.Context)) ([]rueidis.RedisMessage, grantFunc, error) {
	var p any
	if parent != nil {
		p = parent
	}
	res, grant, err := engine.H.Run(ctx, c.parent, p, s, keys, args, undo)
	return res, func(g *engine.Grant) (*redisync.Lease, error) { return asLease(grant(g)) }, err
}

// parentOf returns the live lease ctx carries for the lock key of c, and
// what it holds: the parent of a re-entry; nil if none.
func (c *Client) parentOf(ctx context.Context, key string) (*redisync.Lease, engine.LeaseInfo) {
	v, info, ok := engine.H.Lease(ctx, c.parent, key, nil)
	l, _ := v.(*redisync.Lease)
	if !ok || l == nil {
		return nil, engine.LeaseInfo{}
	}
	return l, info
}

// leaseInfo tells what l holds; false for a nil or failed Lease.
func leaseInfo(l *redisync.Lease) (engine.LeaseInfo, bool) {
	if l == nil {
		return engine.LeaseInfo{}, false
	}
	_, info, ok := engine.H.Lease(nil, nil, "", l)
	return info, ok
}

// redisErr wraps an error from Redis or the connection as the root's
// errors are wrapped.
func redisErr(op string, err error) error { return engine.H.Err(op, err) }

// object is a handle as its methods that run one script see it.
type object interface {
	// check reports why the handle cannot be used with ctx; the receiver
	// may be nil.
	check(ctx context.Context) error
	// object returns the handle's Client, pub/sub mode and name; called
	// only after check passed.
	object() (c *Client, m PubSub, name string)
}

// runOn runs s, the one script of a method of o, as o's methods do: once
// o's check of ctx passed, with keys and args made by call from how to
// publish (redissonPubSub), which the script may need to wake waiters. It
// returns the script's integer reply; an error from Redis or the
// connection is wrapped naming op and o's name.
func runOn(ctx context.Context, o object, s engine.Script, op string, call func(how string) (keys, args []string)) (int64, error) {
	if err := o.check(ctx); err != nil {
		return 0, err
	}
	c, m, name := o.object()
	how, _, _, err := c.redissonPubSub(ctx, m, name)
	if err != nil {
		return 0, err
	}
	keys, args := call(how)
	n, err := s.Exec(ctx, c.rc, keys, args).AsInt64()
	if err != nil {
		return 0, redisErr(op+" "+name, err)
	}
	return n, nil
}

// found is the outcome of a script that answers 1 when it found what it
// acts on.
func found(n int64, err error) (bool, error) { return n == 1, err }

// probe is what the Client's presence pass reads for the waiters of a
// channel.
type probe = func(rc rueidis.Client) rueidis.Completed

// The scripts, in lua/: each one is sent as its files joined in order
// (prelude.lua: publishing and the re-entry rules; the *_prelude.lua
// files: each object's layout).
//
//go:embed lua/*.lua
var luaFiles embed.FS

// newScript makes the script of the named files of lua/, joined in order.
func newScript(files ...string) engine.Script {
	return engine.NewScript(engine.Source(luaFiles, "lua", files...))
}

// validName checks an object's name.
func validName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty lock name", redisync.ErrInvalidArgument)
	}
	return nil
}

// clientIDOf returns the id of the Client an owner id (ID:N) is of.
func clientIDOf(owner string) string {
	if i := strings.LastIndexByte(owner, ':'); i >= 0 {
		return owner[:i]
	}
	return owner
}

// lastHolder is the holder's field that the last attempt of a wait that
// found the lock taken saw (the third element of its script's reply), for
// the error of a wait that its ctx ends (engine.Wait.Holder).
type lastHolder struct{ p atomic.Pointer[string] }

// saw records the holder in the reply of an attempt that found the lock
// taken: none when the reply names none (a fair lock free for the head
// of its queue).
func (h *lastHolder) saw(res []rueidis.RedisMessage) {
	var f string
	if len(res) > 2 {
		f, _ = res[2].ToString()
	}
	h.p.Store(&f)
}

// get returns the holder last seen, "" if none.
func (h *lastHolder) get() string {
	if f := h.p.Load(); f != nil {
		return *f
	}
	return ""
}
