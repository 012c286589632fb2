-- Read a lock's state in one step.
-- KEYS[1] lock hash, KEYS[2] queue zset.
-- Returns {owner or '', token or '0', holds, pttl, places in the queue}.
local owner = redis.call('HGET', KEYS[1], 'owner')
local queued = redis.call('ZCARD', KEYS[2])
if owner == false then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return redis.error_reply('WRONGTYPE lock key holds a hash that is not a lock')
  end
  return {'', '0', 0, -2, queued}
end
return {owner, redis.call('HGET', KEYS[1], 'token'), redis.call('HLEN', KEYS[1]) - 2, redis.call('PTTL', KEYS[1]), queued}
