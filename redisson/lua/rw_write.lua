-- Take a write hold of a Redisson read-write lock, as Redisson's write
-- lock does: a free lock, or one whose writer is this owner (a re-entry,
-- which adds the lease to the hash's remaining time, as Redisson does).
-- KEYS[1] the hash, KEYS[2] the queue of a Redisson fair lock of the same
-- name. ARGV[1] lease ms, ARGV[2] write field (uuid:threadId:write),
-- ARGV[3] (optional) 'r' for a re-entry: only while the owner writes.
-- Returns {1, holds} when taken, {0, pttl, holder} when held by others
-- (holder: one of their fields), {-1, why}
-- when a re-entry is refused (rlock_reentry_refused).
local mode, bad = rw_layout(KEYS[1])
if bad then
  return bad
end
local refused = rlock_reentry_refused(ARGV[3], KEYS[1], mode == 'write', ARGV[2])
if refused then
  return refused
end
if mode == false then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is a Redisson fair lock with queued waiters, not a Redisson read-write lock')
  end
  redis.call('HSET', KEYS[1], 'mode', 'write', ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return {1, 1}
end
if mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  local n = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], redis.call('PTTL', KEYS[1]) + tonumber(ARGV[1]))
  return {1, n}
end
return {0, redis.call('PTTL', KEYS[1]), rholder(KEYS[1])}
