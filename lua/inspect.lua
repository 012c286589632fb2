-- Read a lock's state in one step.
-- KEYS[1] lock hash (see the prelude), KEYS[2] queue zset.
-- Returns {owner or '', token or '0', holds, pttl, places in the queue}.
local owner, holds, token, last, bad = lock_of(KEYS[1])
if bad then
  return bad
end
local queued = redis.call('ZCARD', KEYS[2])
if owner == false then
  return {'', '0', 0, -2, queued}
end
return {owner, token, count_holds(holds), redis.call('PTTL', KEYS[1]), queued}
