package redisync

import (
	"context"
	"embed"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync/internal/engine"
)

// The scripts, in lua/: each one is sent as its file after the preludes it
// uses (prelude.lua: publishing, the clock, telling a waiter; lock.lua and
// lock_queue.lua: the lock hash and the queue of Mutex and FairMutex;
// rw_prelude.lua and sem_prelude.lua: the layouts of RWMutex and
// Semaphore). The hot scripts of Mutex and FairMutex put their common case
// (acquire_free.lua, release_last.lua, fair_free.lua) between lock.lua and
// the prelude: Lua defines a script's functions as it runs, and a call that
// returns there defines only lock.lua's.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// The scripts of Mutex, and those every lock of one key shares.
var (
	acquireScript  = newScript("lock", "acquire_free", "prelude", "lock_queue", "acquire")
	releaseScript  = newScript("lock", "release_last", "prelude", "lock_queue", "release")
	renewScript    = newScript("lock", "renew")
	forceScript    = newScript("lock", "prelude", "lock_queue", "force")
	leaveScript    = newScript("lock", "prelude", "lock_queue", "leave")
	inspectScript  = newScript("lock", "prelude", "lock_queue", "inspect")
	presenceScript = newScript("lock", "prelude", "lock_queue", "presence")
)

// The scripts of Group and Quorum.
var (
	groupAcquireScript = newScript("lock", "prelude", "lock_queue", "group_acquire")
	groupReleaseScript = newScript("lock", "prelude", "lock_queue", "group_release")
	groupFenceScript   = newScript("lock", "group_fence")
)

// The scripts of RWMutex.
var (
	rwRLockScript   = newScript("prelude", "rw_prelude", "rw_rlock")
	rwRUnlockScript = newScript("prelude", "rw_prelude", "rw_runlock")
	rwLockScript    = newScript("prelude", "rw_prelude", "rw_lock")
	rwUnlockScript  = newScript("prelude", "rw_prelude", "rw_unlock")
	rwRenewScript   = newScript("prelude", "rw_prelude", "rw_renew")
	rwForceScript   = newScript("prelude", "rw_prelude", "rw_force")
	rwInspectScript = newScript("prelude", "rw_prelude", "rw_inspect")
)

// The scripts of Semaphore and Latch.
var (
	semAcquireScript = newScript("prelude", "sem_prelude", "sem_acquire")
	semReleaseScript = newScript("prelude", "sem_prelude", "sem_release")
	semRenewScript   = newScript("sem_renew")
	semSizeScript    = newScript("prelude", "sem_prelude", "sem_size")
	semInspectScript = newScript("prelude", "sem_prelude", "sem_inspect")
	semDeleteScript  = newScript("prelude", "sem_prelude", "sem_delete")
	latchSetScript   = newScript("prelude", "latch_set")
	latchDownScript  = newScript("prelude", "latch_down")
	latchGetScript   = newScript("latch_get")
)

// The scripts of FairMutex and of fenced writes.
var (
	fairAcquireScript = newScript("lock", "fair_free", "prelude", "lock_queue", "fair_acquire")
	fencedSetScript   = newScript("fenced_set")
)

// script is a Lua script run as EVALSHA, falling back to EVAL when the
// server does not know it yet (after a restart or a failover).
type script struct {
	lua *rueidis.Lua
	src string
	sha string
}

// newScript makes the script of the named files of lua/, joined in order.
func newScript(files ...string) script {
	return scriptOf(engine.NewScript(engine.Source(luaFiles, "lua", files...)))
}

// scriptOf is the script of s, a script of the seam (see layouts.go).
func scriptOf(s engine.Script) script { return script{lua: s.Lua, src: s.Src, sha: s.SHA} }

func (s script) exec(ctx context.Context, rc rueidis.Client, keys, args []string) rueidis.RedisResult {
	return s.lua.Exec(ctx, rc, keys, args)
}

// batch runs the script once per entry in one pipeline, then again with
// EVAL, one by one, for the entries the server answered NOSCRIPT. Unlike
// rueidis.Lua.ExecMulti it sends no SCRIPT LOAD first, so a batch the server
// knows costs one round trip.
func (s script) batch(ctx context.Context, rc rueidis.Client, batch []rueidis.LuaExec) []rueidis.RedisResult {
	cmds := make(rueidis.Commands, len(batch))
	for i, b := range batch {
		cmds[i] = rc.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(b.Keys))).Key(b.Keys...).Arg(b.Args...).Build()
	}
	res := rc.DoMulti(ctx, cmds...)
	for i, r := range res {
		if re, ok := rueidis.IsRedisErr(r.Error()); ok && re.IsNoScript() {
			res[i] = s.exec(ctx, rc, batch[i].Keys, batch[i].Args)
		}
	}
	return res
}

// execAndWait runs the script and then WAIT on one dedicated connection, so
// that the WAIT covers the script's writes. It returns the script's reply
// and the number of replicas that acknowledged.
func (s script) execAndWait(ctx context.Context, rc rueidis.Client, keys, args []string, replicas int, timeout time.Duration) (res []rueidis.RedisMessage, acked int64, err error) {
	msg, acked, err := s.execWaiting(ctx, rc, keys, args, replicas, timeout)
	if err != nil {
		return nil, 0, err
	}
	if res, err = msg.ToArray(); err != nil {
		return nil, 0, err
	}
	return res, acked, nil
}

// execWaiting is execAndWait for a script whose reply may be other than an
// array.
func (s script) execWaiting(ctx context.Context, rc rueidis.Client, keys, args []string, replicas int, timeout time.Duration) (res rueidis.RedisMessage, acked int64, err error) {
	err = rc.Dedicated(func(d rueidis.DedicatedClient) error {
		wait := func() rueidis.Completed {
			return d.B().Wait().Numreplicas(int64(replicas)).Timeout(timeout.Milliseconds()).Build()
		}
		out := d.DoMulti(ctx, d.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait())
		if re, ok := rueidis.IsRedisErr(out[0].Error()); ok && re.IsNoScript() {
			out = d.DoMulti(ctx, d.B().Eval().Script(s.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait())
		}
		if res, err = out[0].ToMessage(); err != nil {
			return err
		}
		acked, err = out[1].AsInt64()
		return err
	})
	return res, acked, err
}
