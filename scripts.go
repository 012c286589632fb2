package redisync

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"time"

	"github.com/redis/rueidis"
)

var (
	//go:embed lua/prelude.lua
	preludeLua string
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/renew.lua
	renewLua string
	//go:embed lua/force.lua
	forceLua string
	//go:embed lua/inspect.lua
	inspectLua string
	//go:embed lua/leave.lua
	leaveLua string
	//go:embed lua/fair_acquire.lua
	fairAcquireLua string
	//go:embed lua/presence.lua
	presenceLua string
)

var (
	acquireScript  = newScript(preludeLua + acquireLua)
	releaseScript  = newScript(preludeLua + releaseLua)
	renewScript    = newScript(renewLua)
	forceScript    = newScript(preludeLua + forceLua)
	leaveScript    = newScript(preludeLua + leaveLua)
	inspectScript  = newScript(inspectLua)
	presenceScript = newScript(preludeLua + presenceLua)
)

// The scripts of RWMutex.
var (
	//go:embed lua/rw_prelude.lua
	rwPreludeLua string
	//go:embed lua/rw_rlock.lua
	rwRLockLua string
	//go:embed lua/rw_runlock.lua
	rwRUnlockLua string
	//go:embed lua/rw_lock.lua
	rwLockLua string
	//go:embed lua/rw_unlock.lua
	rwUnlockLua string
	//go:embed lua/rw_renew.lua
	rwRenewLua string
	//go:embed lua/rw_force.lua
	rwForceLua string
	//go:embed lua/rw_inspect.lua
	rwInspectLua string
)

var (
	rwRLockScript   = newScript(preludeLua + rwPreludeLua + rwRLockLua)
	rwRUnlockScript = newScript(preludeLua + rwPreludeLua + rwRUnlockLua)
	rwLockScript    = newScript(preludeLua + rwPreludeLua + rwLockLua)
	rwUnlockScript  = newScript(preludeLua + rwPreludeLua + rwUnlockLua)
	rwRenewScript   = newScript(preludeLua + rwPreludeLua + rwRenewLua)
	rwForceScript   = newScript(preludeLua + rwPreludeLua + rwForceLua)
	rwInspectScript = newScript(preludeLua + rwPreludeLua + rwInspectLua)
)

// The scripts of Semaphore and Latch.
var (
	//go:embed lua/sem_prelude.lua
	semPreludeLua string
	//go:embed lua/sem_acquire.lua
	semAcquireLua string
	//go:embed lua/sem_release.lua
	semReleaseLua string
	//go:embed lua/sem_renew.lua
	semRenewLua string
	//go:embed lua/sem_size.lua
	semSizeLua string
	//go:embed lua/sem_inspect.lua
	semInspectLua string
	//go:embed lua/sem_delete.lua
	semDeleteLua string
	//go:embed lua/latch_set.lua
	latchSetLua string
	//go:embed lua/latch_down.lua
	latchDownLua string
	//go:embed lua/latch_get.lua
	latchGetLua string
)

var (
	semAcquireScript = newScript(preludeLua + semPreludeLua + semAcquireLua)
	semReleaseScript = newScript(preludeLua + semPreludeLua + semReleaseLua)
	semRenewScript   = newScript(semRenewLua)
	semSizeScript    = newScript(preludeLua + semPreludeLua + semSizeLua)
	semInspectScript = newScript(preludeLua + semPreludeLua + semInspectLua)
	semDeleteScript  = newScript(preludeLua + semPreludeLua + semDeleteLua)
	latchSetScript   = newScript(preludeLua + latchSetLua)
	latchDownScript  = newScript(preludeLua + latchDownLua)
	latchGetScript   = newScript(latchGetLua)
)

// The scripts of Group and Quorum.
var (
	//go:embed lua/group_acquire.lua
	groupAcquireLua string
	//go:embed lua/group_release.lua
	groupReleaseLua string
	//go:embed lua/group_fence.lua
	groupFenceLua string
)

var (
	groupAcquireScript = newScript(preludeLua + groupAcquireLua)
	groupReleaseScript = newScript(preludeLua + groupReleaseLua)
	groupFenceScript   = newScript(groupFenceLua)
)

// script is a Lua script run as EVALSHA, falling back to EVAL when the
// server does not know it yet (after a restart or a failover).
type script struct {
	lua *rueidis.Lua
	src string
	sha string
}

func newScript(src string) script {
	sum := sha1.Sum([]byte(src))
	return script{lua: rueidis.NewLuaScript(src), src: src, sha: hex.EncodeToString(sum[:])}
}

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
	err = rc.Dedicated(func(d rueidis.DedicatedClient) error {
		wait := func() rueidis.Completed {
			return d.B().Wait().Numreplicas(int64(replicas)).Timeout(timeout.Milliseconds()).Build()
		}
		out := d.DoMulti(ctx, d.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait())
		if re, ok := rueidis.IsRedisErr(out[0].Error()); ok && re.IsNoScript() {
			out = d.DoMulti(ctx, d.B().Eval().Script(s.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait())
		}
		if res, err = out[0].ToArray(); err != nil {
			return err
		}
		acked, err = out[1].AsInt64()
		return err
	})
	return res, acked, err
}
