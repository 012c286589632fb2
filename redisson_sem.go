package redisync

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Redisson's semaphore (RSemaphore):
//
//	string NAME: the permits available
//	channel redisson_sc:{NAME}, message: the permits available after a
//	        release or a change

// The scripts of Redisson's semaphore and count-down latch.
var (
	redissonSemAcquireScript  = newScript("redisson_sem_prelude", "redisson_sem_acquire")
	redissonSemReleaseScript  = newScript("redisson_prelude", "redisson_sem_prelude", "redisson_sem_release")
	redissonSemSetScript      = newScript("redisson_prelude", "redisson_sem_prelude", "redisson_sem_set")
	redissonSemCheckScript    = newScript("redisson_sem_check")
	redissonCountGetScript    = newScript("redisson_sem_prelude", "redisson_count_get")
	redissonLatchSetScript    = newScript("redisson_prelude", "redisson_sem_prelude", "redisson_latch_set")
	redissonLatchDownScript   = newScript("redisson_prelude", "redisson_sem_prelude", "redisson_latch_down")
	redissonLatchDeleteScript = newScript("redisson_prelude", "redisson_sem_prelude", "redisson_latch_delete")
)

// redissonNoExpiry is the lease of a holder of Redisson semaphore permits,
// which never expire.
const redissonNoExpiry = 100 * 365 * 24 * time.Hour

// RedissonSemaphore is a semaphore in the layout of Redisson's RSemaphore
// (redisson.getSemaphore(NAME) in Java): the string NAME counts the
// permits available, and whoever takes some takes them off it. It is a
// cheap handle: make one per use or share one, from many goroutines.
//
// Redisson's permits are not leased: nothing in Redis records who holds
// them, and they never expire. A Lease of permits here is therefore not
// renewed and cannot be lost by expiry or by a crash: permits held by a
// process that dies are gone until somebody adds them back (AddPermits),
// as in Redisson. The Lease reports ErrExpired only when the semaphore is
// deleted while it holds permits (its Unlock then gives nothing back), and
// ErrClosed when its Client closes (the permits are given back then). Its
// Deadline is far off. Where permits must come back on their own after a
// crash, use the library's Semaphore, whose permits are leased.
//
// Compared with Semaphore: no fairness (a release wakes every waiter and
// whoever comes first takes the permits), no size (TrySetPermits and
// AddPermits set the permits available, and a release can raise them
// above any size), no lease, no fencing token.
type RedissonSemaphore struct {
	c    *Client
	name string
	cfg  redissonConfig
	err  error
}

// RedissonSemaphore returns the Redisson RSemaphore of the given name. An
// invalid name or option is reported by every method, as
// ErrInvalidArgument.
func (c *Client) RedissonSemaphore(name string, opts ...RedissonOption) *RedissonSemaphore {
	s := &RedissonSemaphore{c: c, name: name}
	s.cfg, s.err = newRedissonConfig(c, name, opts)
	return s
}

// Name returns the semaphore's name.
func (s *RedissonSemaphore) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

func (s *RedissonSemaphore) channel() string { return redissonPrefixName("redisson_sc", s.name) }

func (s *RedissonSemaphore) check(ctx context.Context) error {
	if s == nil {
		return fmt.Errorf("%w: nil RedissonSemaphore", ErrInvalidArgument)
	}
	return checkHandle("RedissonSemaphore", s.c, s.err, ctx)
}

// redissonSemAcq is one acquisition of n permits, as a handle.
type redissonSemAcq struct {
	s *RedissonSemaphore
	n int
}

func (a redissonSemAcq) check(ctx context.Context) error {
	if err := a.s.check(ctx); err != nil {
		return err
	}
	if a.n < 1 {
		return fmt.Errorf("%w: %d permits: at least 1", ErrInvalidArgument, a.n)
	}
	return nil
}

func (a redissonSemAcq) spans() []*Client { return []*Client{a.s.c} }

// Lock takes n permits, waiting as long as ctx allows: for Redisson's
// message on the semaphore's channel, which the Client's waiters share one
// subscription to, and looking again when the Client's presence pass (a
// second apart by default) finds the permits changed, whatever messages
// were lost. A semaphore that was never set has no permits: Lock waits for
// them.
//
// It returns ctx.Err() when ctx ends first, and ErrClosed when the Client
// is closed. Connection errors do not end the wait: Lock retries them with
// backoff until ctx ends. Errors Redis replies with are returned at once:
// ErrWrongType when NAME holds something else than a number. n below 1 is
// ErrInvalidArgument. Whenever Lock returns an error nothing is held.
func (s *RedissonSemaphore) Lock(ctx context.Context, n int) (*Lease, error) {
	return lockHandle(ctx, redissonSemAcq{s, n}, false)
}

// TryLock makes a single attempt: ErrNoPermits (which matches ErrLocked)
// when fewer than n permits are available, ErrWrongType and
// ErrInvalidArgument as Lock, and any error from Redis or the connection
// at once.
func (s *RedissonSemaphore) TryLock(ctx context.Context, n int) (*Lease, error) {
	return lockHandle(ctx, redissonSemAcq{s, n}, true)
}

// Acquire takes n permits in the background and delivers one Lease on the
// returned channel, then closes it, as Mutex.Acquire does: check the
// Lease's Err first; cancel ctx to give up, and a Lease not yet received
// when ctx ends gives its permits back.
func (s *RedissonSemaphore) Acquire(ctx context.Context, n int) <-chan *Lease {
	return acquireHandle(ctx, redissonSemAcq{s, n})
}

func (a redissonSemAcq) acquire(ctx context.Context, try bool) (*Lease, error) {
	s, c := a.s, a.s.c
	how, classic, sharded, err := c.redissonPubSub(ctx, s.cfg.pubsub)
	if err != nil {
		return nil, err
	}
	kind := redissonSemKinds[how]
	n := strconv.Itoa(a.n)
	// The owner is only the holder's name here: Redis knows no owner of
	// Redisson permits. It carries the permits to give back.
	owner := c.newOwner() + "/" + n
	w := redissonWait{
		c: c, channel: s.channel(), classic: classic, sharded: sharded,
		probe: redissonPermitsProbe(s.name), primitive: kind.primitive, name: s.name,
		busy: errorf("%w: Redisson semaphore %s", ErrNoPermits, s.name),
		attempt: func(ctx context.Context) (*Lease, time.Duration, error) {
			sent := time.Now()
			res, err := callInFlight(c, ctx, func(actx context.Context) ([]rueidis.RedisMessage, error) {
				return redissonSemAcquireScript.exec(actx, c.rc, []string{s.name}, []string{n}).ToArray()
			})
			if err != nil {
				return nil, 0, redisErr("acquire from Redisson semaphore "+s.name, err)
			}
			if len(res) < 2 {
				return nil, 0, fmt.Errorf("redisync: acquire from Redisson semaphore: unexpected reply of %d elements", len(res))
			}
			if ok, _ := res[0].AsInt64(); ok != 1 {
				return nil, -1, nil
			}
			keys := lockKeys{lock: s.name, channel: s.channel()}
			gl, err := c.grant(ctx, grant{kind: kind, name: s.name, keys: keys, key: s.name, owner: owner, lease: redissonNoExpiry, watchdog: false, sent: sent})
			return gl, 0, err
		},
		// An attempt whose outcome is unknown may have taken the permits:
		// they cannot be told from others', so they are not given back.
	}
	return w.run(ctx, try)
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
func redissonSemPermits(h *holder) string {
	_, n, _ := strings.Cut(h.owner, "/")
	return n
}

// redissonSemKinds are the lease kinds of RSemaphore permit holders, by
// publishing mode.
var redissonSemKinds = map[string]*leaseKind{
	"c": newRedissonSemKind("c"),
	"s": newRedissonSemKind("s"),
	"b": newRedissonSemKind("b"),
}

func newRedissonSemKind(how string) *leaseKind {
	return &leaseKind{
		primitive: "redisson_semaphore",
		renew:     redissonSemCheckScript,
		release:   redissonSemReleaseScript,
		releaseAll: func(h *holder) rueidis.LuaExec {
			return rueidis.LuaExec{Keys: []string{h.key, h.keys.channel}, Args: []string{redissonSemPermits(h), how, "1"}}
		},
		unlock: func(ctx context.Context, h *holder, _ string) (releaseState, error) {
			err := redissonSemReleaseScript.exec(ctx, h.c.rc, []string{h.key, h.keys.channel}, []string{redissonSemPermits(h), how, "1"}).Error()
			switch {
			case rueidis.IsRedisNil(err):
				return notHeld, nil
			case err != nil:
				return notHeld, redisErr("release to Redisson semaphore "+h.name, err)
			}
			return freed, nil
		},
	}
}

// TrySetPermits sets the permits available when the semaphore has none
// yet (its key does not exist), as Java's trySetPermits, and wakes its
// waiters. It reports whether it set them. n must not be negative.
// ErrWrongType when NAME holds something else; an error from Redis or the
// connection, or ctx's end, is returned as it comes.
func (s *RedissonSemaphore) TrySetPermits(ctx context.Context, n int) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	if n < 0 {
		return false, fmt.Errorf("%w: %d permits", ErrInvalidArgument, n)
	}
	how, _, _, err := s.c.redissonPubSub(ctx, s.cfg.pubsub)
	if err != nil {
		return false, err
	}
	v, err := redissonSemSetScript.exec(ctx, s.c.rc, []string{s.name, s.channel()}, []string{strconv.Itoa(n), how}).AsInt64()
	if err != nil {
		return false, redisErr("set Redisson semaphore "+s.name, err)
	}
	return v == 1, nil
}

// AddPermits adds n permits (takes them away when n is negative, which
// can leave fewer than none available), as Java's addPermits, wakes the
// waiters, and returns the permits available after. A semaphore that
// does not exist starts from 0. Errors as TrySetPermits.
func (s *RedissonSemaphore) AddPermits(ctx context.Context, n int) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	how, _, _, err := s.c.redissonPubSub(ctx, s.cfg.pubsub)
	if err != nil {
		return 0, err
	}
	v, err := redissonSemReleaseScript.exec(ctx, s.c.rc, []string{s.name, s.channel()}, []string{strconv.Itoa(n), how, "0"}).AsInt64()
	if err != nil {
		return 0, redisErr("add to Redisson semaphore "+s.name, err)
	}
	return v, nil
}

// AvailablePermits returns the permits available (0 when the semaphore
// does not exist). Errors as TrySetPermits.
func (s *RedissonSemaphore) AvailablePermits(ctx context.Context) (int64, error) {
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
	res, err := redissonCountGetScript.exec(ctx, rc, []string{name}, []string{what}).AsIntSlice()
	if err != nil {
		return false, 0, 0, redisErr("read Redisson "+what+" "+name, err)
	}
	if len(res) < 3 {
		return false, 0, 0, fmt.Errorf("redisync: read Redisson %s: unexpected reply of %d elements", what, len(res))
	}
	return res[0] == 1, res[1], time.Duration(res[2]) * time.Millisecond, nil
}

// RedissonSemaphoreState is a snapshot of a semaphore in Redisson's
// RSemaphore layout.
type RedissonSemaphoreState struct {
	// Exists tells whether NAME exists (the permits were set).
	Exists bool
	// Available is the permits available (0 when NAME does not exist).
	Available int64
	// TTL is NAME's remaining time to live; negative when it has no
	// expiry or does not exist.
	TTL time.Duration
}

// InspectRedissonSemaphore reads the Redisson semaphore (RSemaphore) of
// the given name through rc, changing nothing: what `redisync inspect
// --redisson semaphore` shows. The string NAME of an RSemaphore cannot be
// told from an RCountDownLatch's, an RPermitExpirableSemaphore's or any
// counter's: it is read as a semaphore because the caller says it is one.
// A key that is not a string holding an integer is ErrWrongType; a name
// with no key is a state with Exists false.
func InspectRedissonSemaphore(ctx context.Context, rc rueidis.Client, name string) (RedissonSemaphoreState, error) {
	if rc == nil || ctx == nil || name == "" {
		return RedissonSemaphoreState{}, fmt.Errorf("%w: nil client or context, or empty name", ErrInvalidArgument)
	}
	exists, v, ttl, err := redissonCountTTL(ctx, rc, name, "semaphore")
	return RedissonSemaphoreState{Exists: exists, Available: v, TTL: ttl}, err
}
