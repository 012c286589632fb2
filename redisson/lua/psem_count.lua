-- Count the permits of a Redisson RPermitExpirableSemaphore, after
-- reclaiming the expired ones, as Redisson's availablePermits,
-- acquiredPermits and getPermits do.
-- KEYS[1] the semaphore, KEYS[2] its permits zset, KEYS[3] its channel.
-- ARGV[1] publishing mode, ARGV[2] 'available', 'acquired' or 'permits'
-- (available and acquired; 0 when the semaphore has no value).
local v, bad = psem_layout(KEYS[1], KEYS[2])
if bad then
  return bad
end
if psem_reclaim(KEYS[1], KEYS[2], KEYS[3], psem_now(), nil, ARGV[1]) > 0 then
  v = tonumber(redis.call('GET', KEYS[1]))
end
local acquired = redis.call('ZCARD', KEYS[2])
if ARGV[2] == 'acquired' then
  return acquired
end
if v == false then
  return 0
end
if ARGV[2] == 'permits' then
  return v + acquired
end
return v
