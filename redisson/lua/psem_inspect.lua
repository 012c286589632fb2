-- Read a Redisson RPermitExpirableSemaphore without changing anything:
-- expired permits are listed, not reclaimed.
-- KEYS[1] the semaphore, KEYS[2] its permits zset.
-- Returns {1 when the semaphore has a value (else 0), the permits
-- available, its PTTL, the server's time in ms, then each permit's id and
-- score, the nearest expiry first}.
local v, bad = psem_layout(KEYS[1], KEYS[2])
if bad then
  return bad
end
local res = {v and 1 or 0, v or 0, redis.call('PTTL', KEYS[1]), psem_now()}
for _, x in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')) do
  table.insert(res, x)
end
return res
