-- Read a lock's state in one step.
-- KEYS[1] lock key, KEYS[2] queue zset, KEYS[3] fence key.
-- Returns {owner or '', token or '0', holds, pttl, places in the queue}.
local l = read_lock(KEYS[1], KEYS[3])
local queued = redis.call('ZCARD', KEYS[2])
if l == nil then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return redis.error_reply('WRONGTYPE lock key holds a value that is not a lock')
  end
  return {'', '0', 0, -2, queued}
end
return {l[1], l[2], #l - 2, redis.call('PTTL', KEYS[1]), queued}
