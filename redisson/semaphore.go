package redisson

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/internal/engine"

	"github.com/redis/rueidis"
)

// Redisson's semaphore (RSemaphore):
//
//	string NAME: the permits available
//	channel redisson_sc:{NAME}, message: the permits available after a
//	        release or a change

// The scripts of Redisson's semaphore and count-down latch.
var (
	redissonSemAcquireScript  = newScript("sem_prelude", "sem_acquire")
	redissonSemReleaseScript  = newScript("prelude", "sem_prelude", "sem_release")
	redissonSemSetScript      = newScript("prelude", "sem_prelude", "sem_set")
	redissonSemCheckScript    = newScript("sem_check")
	redissonCountGetScript    = newScript("sem_prelude", "count_get")
	redissonLatchSetScript    = newScript("prelude", "sem_prelude", "latch_set")
	redissonLatchDownScript   = newScript("prelude", "sem_prelude", "latch_down")
	redissonLatchDeleteScript = newScript("prelude", "sem_prelude", "latch_delete")
)

// redissonNoExpiry is the lease of a holder of Redisson semaphore permits,
// which never expire.
const redissonNoExpiry = 100 * 365 * 24 * time.Hour

// Semaphore is a semaphore in the layout of Redisson's RSemaphore
// (redisson.getSemaphore(NAME) in Java): the string NAME counts the
// permits available, and whoever takes some takes them off it. It is a
// cheap handle: make one per use or share one, from many goroutines.
//
// Redisson's permits are not leased: nothing in Redis records who holds
// them, and they never expire. A Lease of permits here is therefore not
// renewed and cannot be lost by expiry or by a crash: permits held by a
// process that dies are gone until somebody adds them back (AddPermits),
// as in Redisson. The Lease reports redisync.ErrExpired only when the semaphore is
// deleted while it holds permits (its Unlock then gives nothing back), and
// redisync.ErrClosed when its Client closes (the permits are given back then). Its
// Deadline is far off. Where permits must come back on their own after a
// crash, use the library's Semaphore, whose permits are leased.
//
// Compared with Semaphore: no fairness (a release wakes every waiter and
// whoever comes first takes the permits), no size (TrySetPermits and
// AddPermits set the permits available, and a release can raise them
// above any size), no lease, no fencing token.
type Semaphore struct {
	c    *Client
	name string
	cfg  config
	err  error
}

// Semaphore returns the Redisson RSemaphore of the given name. An
// invalid name or option is reported by every method, as
// redisync.ErrInvalidArgument.
func (c *Client) Semaphore(name string, opts ...Option) *Semaphore {
	s := &Semaphore{c: c, name: name}
	s.cfg, s.err = newConfig(c, name, opts)
	return s
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

func (s *Semaphore) channel() string { return redissonPrefixName("redisson_sc", s.name) }

func (s *Semaphore) check(ctx context.Context) error {
	if s == nil {
		return fmt.Errorf("%w: nil Semaphore", redisync.ErrInvalidArgument)
	}
	return checkHandle("Semaphore", s.c, s.err, ctx)
}

func (s *Semaphore) object() (*Client, PubSub, string) { return s.c, s.cfg.pubsub, s.name }

// redissonSemAcq is one acquisition of n permits, as a handle.
type redissonSemAcq struct {
	s *Semaphore
	n int
}

func (a redissonSemAcq) check(ctx context.Context) error {
	if err := a.s.check(ctx); err != nil {
		return err
	}
	if a.n < 1 {
		return fmt.Errorf("%w: %d permits: at least 1", redisync.ErrInvalidArgument, a.n)
	}
	return nil
}

func (a redissonSemAcq) client() *Client { return a.s.c }

// Lock takes n permits, waiting as long as ctx allows: for Redisson's
// message on the semaphore's channel, which the Client's waiters share one
// subscription to, and looking again when the Client's presence pass (a
// second apart by default) finds the permits changed, whatever messages
// were lost. A semaphore that was never set has no permits: Lock waits for
// them.
//
// It returns, when ctx ends first, an error naming the semaphore that matches both
// ctx.Err() and redisync.ErrNoPermits (a single attempt's redisync.ErrNoPermits never matches
// ctx's error), and redisync.ErrClosed when the Client
// is closed. Connection errors do not end the wait: Lock retries them with
// backoff until ctx ends. Errors Redis replies with are returned at once:
// redisync.ErrWrongType when NAME holds something else than a number. n below 1 is
// redisync.ErrInvalidArgument. Whenever Lock returns an error nothing is held.
func (s *Semaphore) Lock(ctx context.Context, n int) (*redisync.Lease, error) {
	return lockHandle(ctx, redissonSemAcq{s, n}, false)
}

// TryLock makes a single attempt: redisync.ErrNoPermits (which matches redisync.ErrLocked)
// when fewer than n permits are available, redisync.ErrWrongType and
// redisync.ErrInvalidArgument as Lock, and any error from Redis or the connection
// at once.
func (s *Semaphore) TryLock(ctx context.Context, n int) (*redisync.Lease, error) {
	return lockHandle(ctx, redissonSemAcq{s, n}, true)
}

// Acquire takes n permits in the background and delivers one Lease on the
// returned channel, then closes it, as Mutex.Acquire does: check the
// Lease's Err first; cancel ctx to give up, and a Lease not yet received
// when ctx ends gives its permits back.
func (s *Semaphore) Acquire(ctx context.Context, n int) <-chan *redisync.Lease {
	return acquireHandle(ctx, redissonSemAcq{s, n})
}

func (a redissonSemAcq) acquire(ctx context.Context, try bool) (*redisync.Lease, error) {
	s, c := a.s, a.s.c
	how, classic, sharded, err := c.redissonPubSub(ctx, s.cfg.pubsub, s.name)
	if err != nil {
		return nil, err
	}
	kind := redissonSemKinds[how]
	n := strconv.Itoa(a.n)
	// The owner is only the holder's name here: Redis knows no owner of
	// Redisson permits. It carries the permits to give back.
	owner := c.newOwner() + "/" + n
	w := engine.Wait{
		Channel: s.channel(), Classic: classic, Sharded: sharded,
		Probe: redissonPermitsProbe(s.name), Primitive: kind.Primitive, Name: s.name,
		Busy: fmt.Errorf("%w: Redisson semaphore %s", redisync.ErrNoPermits, s.name),
		Attempt: func(ctx context.Context) (any, time.Duration, error) {
			sent := time.Now()
			// Nothing to undo: see below.
			res, grant, err := c.run(ctx, nil, redissonSemAcquireScript, []string{s.name}, []string{n}, nil)
			if err != nil {
				return nil, 0, redisErr("acquire from Redisson semaphore "+s.name, err)
			}
			if len(res) < 2 {
				return nil, 0, fmt.Errorf("redisync: acquire from Redisson semaphore: unexpected reply of %d elements", len(res))
			}
			if ok, _ := res[0].AsInt64(); ok != 1 {
				return nil, -1, nil
			}
			keys := engine.Keys{Lock: s.name, Channel: s.channel()}
			gl, err := grant(&engine.Grant{Kind: kind, Name: s.name, Keys: keys, Key: s.name, Owner: owner, Lease: redissonNoExpiry, Watchdog: false, Sent: sent})
			return gl, 0, err
		},
		// An attempt whose outcome is unknown may have taken the permits:
		// they cannot be told from others', so they are not given back.
	}
	return c.wait(ctx, w, try)
}

// redissonPermitsProbe reads the permits of the Redisson semaphore name as
// "=N", and "=" when it has none (never set, or deleted): never empty, for
// the presence pass, which reads empty as free (see subscription.follow),
// and changed whenever the permits change.
func redissonPermitsProbe(name string) probe {
	return func(rc rueidis.Client) rueidis.Completed {
		return rc.B().Eval().Script(redissonPermitsProbeScript).Numkeys(1).Key(name).Build()
	}
}

const redissonPermitsProbeScript = `return '=' .. (redis.call('GET', KEYS[1]) or '')`

// redissonSemPermits is the number of permits a holder holds.
func redissonSemPermits(h engine.Holder) string {
	_, n, _ := strings.Cut(h.Owner, "/")
	return n
}

// redissonSemKinds are the lease kinds of RSemaphore permit holders, by
// publishing mode.
var redissonSemKinds = byHow(newRedissonSemKind)

func newRedissonSemKind(how string) *engine.Kind {
	return &engine.Kind{
		Primitive: "redisson_semaphore",
		Renew:     redissonSemCheckScript,
		Release:   redissonSemReleaseScript,
		ReleaseAll: func(h engine.Holder) rueidis.LuaExec {
			return rueidis.LuaExec{Keys: []string{h.Key, h.Keys.Channel}, Args: []string{redissonSemPermits(h), how, "1"}}
		},
		Unlock: func(ctx context.Context, h engine.Holder, _ string, _ bool) (engine.State, bool, error) {
			err := redissonSemReleaseScript.Exec(ctx, h.RC, []string{h.Key, h.Keys.Channel}, []string{redissonSemPermits(h), how, "1"}).Error()
			switch {
			case rueidis.IsRedisNil(err):
				return engine.NotHeld, true, nil
			case err != nil:
				return engine.NotHeld, true, redisErr("release to Redisson semaphore "+h.Name, err)
			}
			return engine.Freed, true, nil
		},
	}
}

// TrySetPermits sets the permits available when the semaphore has none
// yet (its key does not exist), as Java's trySetPermits, and wakes its
// waiters. It reports whether it set them. n must not be negative.
// redisync.ErrWrongType when NAME holds something else; an error from Redis or the
// connection, or ctx's end, is returned as it comes.
func (s *Semaphore) TrySetPermits(ctx context.Context, n int) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	if n < 0 {
		return false, fmt.Errorf("%w: %d permits", redisync.ErrInvalidArgument, n)
	}
	return found(runOn(ctx, s, redissonSemSetScript, "set Redisson semaphore", func(how string) ([]string, []string) {
		return []string{s.name, s.channel()}, []string{strconv.Itoa(n), how}
	}))
}

// AddPermits adds n permits (takes them away when n is negative, which
// can leave fewer than none available), as Java's addPermits, wakes the
// waiters, and returns the permits available after. A semaphore that
// does not exist starts from 0. Errors as TrySetPermits.
func (s *Semaphore) AddPermits(ctx context.Context, n int) (int64, error) {
	return runOn(ctx, s, redissonSemReleaseScript, "add to Redisson semaphore", func(how string) ([]string, []string) {
		return []string{s.name, s.channel()}, []string{strconv.Itoa(n), how, "0"}
	})
}

// AvailablePermits returns the permits available (0 when the semaphore
// does not exist). Errors as TrySetPermits.
func (s *Semaphore) AvailablePermits(ctx context.Context) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	_, v, err := redissonCount(ctx, s.c.rc, s.name, "semaphore")
	return v, err
}

// redissonCount reads the number of a Redisson semaphore or latch:
// whether it exists, and its value.
func redissonCount(ctx context.Context, rc rueidis.Client, name, what string) (bool, int64, error) {
	exists, v, _, err := redissonCountTTL(ctx, rc, name, what)
	return exists, v, err
}

// redissonCountTTL is redissonCount, and the key's PTTL.
func redissonCountTTL(ctx context.Context, rc rueidis.Client, name, what string) (bool, int64, time.Duration, error) {
	res, err := redissonCountGetScript.Exec(ctx, rc, []string{name}, []string{what}).ToArray()
	return redissonCountReply(name, what, res, err)
}

// redissonCountReply reads the reply of the count script: whether the
// count exists, the count, and its remaining time.
func redissonCountReply(name, what string, res []rueidis.RedisMessage, err error) (bool, int64, time.Duration, error) {
	if err != nil {
		return false, 0, 0, redisErr("read Redisson "+what+" "+name, err)
	}
	if len(res) < 3 {
		return false, 0, 0, fmt.Errorf("redisync: read Redisson %s: unexpected reply of %d elements", what, len(res))
	}
	var v [3]int64
	for i := range v {
		if v[i], err = res[i].AsInt64(); err != nil {
			return false, 0, 0, redisErr("read Redisson "+what+" "+name, err)
		}
	}
	return v[0] == 1, v[1], time.Duration(v[2]) * time.Millisecond, nil
}

// SemaphoreState is a snapshot of a semaphore in Redisson's
// RSemaphore layout.
type SemaphoreState struct {
	// Exists tells whether NAME exists (the permits were set).
	Exists bool
	// Available is the permits available (0 when NAME does not exist).
	Available int64
	// TTL is NAME's remaining time to live; negative when it has no
	// expiry or does not exist.
	TTL time.Duration
}

// InspectSemaphore reads the Redisson semaphore (RSemaphore) of
// the given name through rc, changing nothing: what `redisync inspect
// --redisson semaphore` shows. The string NAME of an RSemaphore cannot be
// told from an RCountDownLatch's, an RPermitExpirableSemaphore's or any
// counter's: it is read as a semaphore because the caller says it is one.
// A key that is not a string holding an integer is redisync.ErrWrongType; a name
// with no key is a state with Exists false.
func InspectSemaphore(ctx context.Context, rc rueidis.Client, name string) (SemaphoreState, error) {
	if rc == nil || ctx == nil || name == "" {
		return SemaphoreState{}, fmt.Errorf("%w: nil client or context, or empty name", redisync.ErrInvalidArgument)
	}
	exists, v, ttl, err := redissonCountTTL(ctx, rc, name, "semaphore")
	return SemaphoreState{Exists: exists, Available: v, TTL: ttl}, err
}
