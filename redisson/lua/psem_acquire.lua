-- Take permits of a Redisson RPermitExpirableSemaphore, as Redisson's
-- tryAcquire does: reclaim up to as many expired permits as asked for,
-- then, when enough are available, take them and add their ids with their
-- expiry, giving the zset the semaphore's own TTL.
-- KEYS[1] the semaphore, KEYS[2] its permits zset, KEYS[3] its channel.
-- ARGV[1] lease ms, ARGV[2] publishing mode, ARGV[3...] the
-- new permits' ids.
-- Returns {1, available after} when taken; {0, available (-1 when the
-- semaphore has no value), ms until the nearest permit expires (-1 when
-- none has a lease)} when not.
local v, bad = psem_layout(KEYS[1], KEYS[2])
if bad then
  return bad
end
local n = #ARGV - 2
local now = psem_now()
if psem_reclaim(KEYS[1], KEYS[2], KEYS[3], now, n, ARGV[2]) > 0 then
  v = tonumber(redis.call('GET', KEYS[1]))
end
if v and v >= n then
  local left = redis.call('DECRBY', KEYS[1], n)
  local score = now + tonumber(ARGV[1])
  for i = 3, #ARGV do
    redis.call('ZADD', KEYS[2], score, psem_id(ARGV[i]))
  end
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
  return {1, left}
end
local wait = -1
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if first[2] and tonumber(first[2]) < psem_forever then
  wait = math.max(tonumber(first[2]) - now, 0)
end
return {0, v or -1, wait}
