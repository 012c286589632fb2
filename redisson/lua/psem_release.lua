-- Give permits of a Redisson RPermitExpirableSemaphore back by id, as
-- Redisson's tryRelease does, after reclaiming the expired ones, and
-- publish the permits available when they are more than none. A permit is
-- held while its id is in the zset and has not expired.
-- KEYS[1] the semaphore, KEYS[2] its permits zset, KEYS[3] its channel.
-- ARGV[1] publishing mode, ARGV[2] 'all' (every permit is held, or none
-- is given back) or 'each' (those held are given back), ARGV[3...] ids.
-- Returns {permits given back, the positions (from 1) of the ids not
-- held...}.
local v, bad = psem_layout(KEYS[1], KEYS[2])
if bad then
  return bad
end
local now = psem_now()
local held, res = {}, {0}
for i = 3, #ARGV do
  local id = psem_id(ARGV[i])
  local s = redis.call('ZSCORE', KEYS[2], id)
  if s and tonumber(s) > now then
    table.insert(held, id)
  else
    table.insert(res, i - 2)
  end
end
psem_reclaim(KEYS[1], KEYS[2], KEYS[3], now, nil, ARGV[1])
if ARGV[2] == 'all' and #res > 1 then
  return res
end
local removed = 0
for _, id in ipairs(held) do
  removed = removed + redis.call('ZREM', KEYS[2], id)
end
if removed > 0 then
  local n = redis.call('INCRBY', KEYS[1], removed)
  if n > 0 then
    rpublish(KEYS[3], tostring(n), ARGV[1])
  end
end
res[1] = removed
return res
