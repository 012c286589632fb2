-- Acquire a Redisson RFairLock, as Redisson's fair tryLockInnerAsync does:
-- the lock goes to the queue's head, or to anybody when nobody waits; a
-- waiter that finds it taken joins the tail of the queue (unless ARGV[5]
-- is '0', a single attempt), with a timeout of the timeout of the waiter
-- ahead (or the lock's TTL) plus its wait. Whoever takes the lock brings
-- the timeouts of the others forward by its wait.
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] timeouts. ARGV[1] lease ms,
-- ARGV[2] owner field (uuid:threadId), ARGV[3] wait ms, ARGV[4] now ms,
-- ARGV[5] '1' to queue, 'r' for a re-entry: one more hold of the owner's
-- ownership, only while the owner holds the lock (a re-entry never takes
-- a free lock, nor queues).
-- Returns {1, holds} when acquired, {0, ttl, holder} when not (holder: a
-- holder's field, false when free), {-1, why} when a
-- re-entry is refused (rlock_reentry_refused).
local t, bad = rlock_layout(KEYS[1])
if bad then
  return bad
end
bad = rfair_layout(KEYS[2], KEYS[3])
if bad then
  return bad
end
rfair_purge(KEYS[2], KEYS[3], ARGV[4])
local refused = rlock_reentry_refused(ARGV[5], KEYS[1], t ~= 'none', ARGV[2])
if refused then
  return refused
end
if t == 'none' then
  local head = redis.call('LINDEX', KEYS[2], 0)
  if head == false or head == ARGV[2] then
    redis.call('LPOP', KEYS[2])
    redis.call('ZREM', KEYS[3], ARGV[2])
    for _, w in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
      redis.call('ZINCRBY', KEYS[3], -tonumber(ARGV[3]), w)
    end
    redis.call('HSET', KEYS[1], ARGV[2], 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
    return {1, 1}
  end
elseif redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  local holds = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return {1, holds}
end
if ARGV[5] ~= '1' then
  return {0, redis.call('PTTL', KEYS[1]), rholder(KEYS[1])}
end
if redis.call('ZSCORE', KEYS[3], ARGV[2]) ~= false then
  return {0, math.max(0, redis.call('PTTL', KEYS[1])), rholder(KEYS[1])}
end
local last = redis.call('LINDEX', KEYS[2], -1)
local ttl
local score = last ~= false and last ~= ARGV[2] and redis.call('ZSCORE', KEYS[3], last)
if score then
  ttl = tonumber(score) - tonumber(ARGV[4])
else
  ttl = redis.call('PTTL', KEYS[1])
end
if redis.call('ZADD', KEYS[3], ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]), ARGV[2]) == 1 then
  redis.call('RPUSH', KEYS[2], ARGV[2])
end
return {0, ttl, rholder(KEYS[1])}
