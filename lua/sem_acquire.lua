-- Acquire permits of a semaphore, or take a place in its queue.
-- KEYS: see sem_prelude.lua.
-- ARGV[1] member "<owner>:<permits>", ARGV[2] permits, ARGV[3] lease ms,
-- ARGV[4] "1" to queue when the permits cannot be had ("0": try once),
-- ARGV[5] queue place expiry ms, ARGV[6] channel.
-- Returns {1} when the member holds the permits (also when an earlier run
-- of the same call granted them), {0, wait ms or -1, queued} when not: wait
-- is the time until the earliest holder's lease ends; {-1, size} when more
-- permits are asked for than the size; {-2} when the semaphore has no size.
local member, n = ARGV[1], tonumber(ARGV[2])
local size, used, bad = state()
if bad then return bad end
if size == nil then
  leave(member)
  return {-2}
end
local now = now_ms()
local dropped
used, dropped = purge(now, used)
if redis.call('ZSCORE', H, member) then
  return {1}
end
if n > size then
  leave(member)
  if dropped then
    wake(ARGV[6], size, size - used, member)
  end
  return {-1, size}
end
local ok, queued = fits(member, n, size, size - used)
if ok then
  local lease = tonumber(ARGV[3])
  redis.call('ZADD', H, now + lease, member)
  extend(H, lease)
  used = used + n
  redis.call('HSET', S, 'used', used)
  if queued then
    leave(member)
  end
  if dropped then
    wake(ARGV[6], size, size - used, member)
  end
  return {1}
end
local queued = 0
if ARGV[4] == '1' then
  local ttl = tonumber(ARGV[5])
  if redis.call('ZSCORE', Q, member) == false then
    redis.call('ZADD', Q, redis.call('HINCRBY', S, 'seq', 1), member)
  end
  redis.call('ZADD', QT, now + ttl, member)
  extend(Q, ttl)
  extend(QT, ttl)
  queued = 1
end
if dropped then
  wake(ARGV[6], size, size - used, member)
end
local first = redis.call('ZRANGE', H, 0, 0, 'WITHSCORES')
local wait = -1
if #first > 0 then
  wait = tonumber(first[2]) - now
end
return {0, wait, queued}
