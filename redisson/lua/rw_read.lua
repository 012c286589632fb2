-- Take a read hold of a Redisson read-write lock, as Redisson's read lock
-- does: a free lock, one in mode read, or one in mode write whose writer
-- is this owner (a writer may read) gets one more read hold of the owner,
-- with a key of its own that expires with the hold's lease.
-- KEYS[1] the hash, KEYS[2] the queue of a Redisson fair lock of the same
-- name (a name with waiters queued there is a fair lock, not taken).
-- ARGV[1] lease ms, ARGV[2] owner field (uuid:threadId), ARGV[3] its
-- write field (uuid:threadId:write), ARGV[4] (optional) 'r' for a
-- re-entry of the owner's read holds: only while the owner has one.
-- Returns {1, holds, shorter} when taken (shorter: how long the hash had
-- to live when a reader of a shorter lease set it, rw_shorter; 0 if not), {0, pttl, writer} when a writer holds it, {-1,
-- why} when a re-entry is refused (rlock_reentry_refused).
local mode, bad = rw_layout(KEYS[1])
if bad then
  return bad
end
local refused = rlock_reentry_refused(ARGV[4], KEYS[1], mode ~= false, ARGV[2])
if refused then
  return refused
end
if mode == false and redis.call('EXISTS', KEYS[2]) == 1 then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is a Redisson fair lock with queued waiters, not a Redisson read-write lock')
end
if mode == false or mode == 'read' or redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1 then
  if mode == false then
    redis.call('HSET', KEYS[1], 'mode', 'read')
  end
  local n = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('SET', rw_timeout(KEYS[1], ARGV[2]) .. n, 1, 'PX', ARGV[1])
  local shorter = rw_shorter(KEYS[1], ARGV[1])
  local remain = redis.call('PTTL', KEYS[1])
  redis.call('PEXPIRE', KEYS[1], math.max(remain, tonumber(ARGV[1])))
  return {1, n, shorter}
end
return {0, redis.call('PTTL', KEYS[1]), rholder(KEYS[1])}
