-- Read or change the lease of one permit of a Redisson
-- RPermitExpirableSemaphore, after reclaiming the expired ones, as
-- Redisson's getLeaseTime and updateLeaseTime do.
-- KEYS[1] the semaphore, KEYS[2] its permits zset, KEYS[3] its channel.
-- ARGV[1] publishing mode, ARGV[2] 'get' or 'update', ARGV[3] the
-- permit's id, ARGV[4] the new lease in ms (-1: none) for 'update'.
-- Returns -2 when the permit is not held; else, for 'get', the ms left of
-- its lease (-1: none), for 'update' 1.
local v, bad = psem_layout(KEYS[1], KEYS[2])
if bad then
  return bad
end
local now = psem_now()
psem_reclaim(KEYS[1], KEYS[2], KEYS[3], now, nil, ARGV[1])
local id = psem_id(ARGV[3])
local s = redis.call('ZSCORE', KEYS[2], id)
if not s then
  return -2
end
if ARGV[2] == 'get' then
  if tonumber(s) >= psem_forever then
    return -1
  end
  return tonumber(s) - now
end
local lease = tonumber(ARGV[4])
local score = psem_forever
if lease >= 0 then
  score = now + lease
end
redis.call('ZADD', KEYS[2], score, id)
return 1
