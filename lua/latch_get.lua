-- Read a latch.
-- KEYS[1] latch hash (see latch_set.lua).
-- Returns {count, generation}: {0, ""} when the latch is open.
local v = redis.call('HMGET', KEYS[1], 'c', 'g')
if v[1] == false then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return redis.error_reply('WRONGTYPE latch key holds a hash that is not a latch')
  end
  return {0, ''}
end
return {tonumber(v[1]), v[2] or ''}
