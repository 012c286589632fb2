-- Acquire a Redisson RLock or RFencedLock, as Redisson's tryLockInnerAsync
-- does: a free lock, or one the owner holds, gets one more hold in the
-- owner's field and the lease as its expiry.
-- KEYS[1] lock hash, KEYS[2] the queue of a Redisson fair lock of the same
-- name (a lock with waiters queued there is not taken), KEYS[3] the token
-- counter. ARGV[1] lease ms, ARGV[2] owner field (uuid:threadId),
-- ARGV[3] '1' to count a fencing token, ARGV[4] (optional) 'r' for a
-- re-entry: one more hold of the owner's ownership, only while the owner
-- holds the lock (a free lock is not taken).
-- Returns {1, holds, token} when acquired, {0, pttl, holder} when held by
-- another (holder: its field),
-- {-1, why} when a re-entry is refused (rlock_reentry_refused).
local t, bad = rlock_layout(KEYS[1])
if bad then
  return bad
end
local refused = rlock_reentry_refused(ARGV[4], KEYS[1], t ~= 'none', ARGV[2])
if refused then
  return refused
end
if t == 'none' and redis.call('EXISTS', KEYS[2]) == 1 then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is a Redisson fair lock with queued waiters, not a Redisson lock')
end
if t == 'none' or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  local token = 0
  if ARGV[3] == '1' then
    token = redis.call('INCR', KEYS[3])
  end
  local holds = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return {1, holds, token}
end
return {0, redis.call('PTTL', KEYS[1]), rholder(KEYS[1])}
