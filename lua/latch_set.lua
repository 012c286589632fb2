-- Set the count of a latch.
-- KEYS[1] latch hash: c = count, g = generation (the server time, in
-- seconds and microseconds, at which it was set while open). An open latch
-- has no key.
-- ARGV[1] "nx" (only while open) or "set"; ARGV[2] count; ARGV[3] channel.
-- Returns {1, previous count} when set, {0, count} when "nx" found the
-- latch closed. A count of 0 opens the latch: the key is deleted and every
-- waiter woken.
local c, bad = field_of(KEYS[1], 'c', 'latch')
if bad then return bad end
local prev = tonumber(c or '0')
local count = tonumber(ARGV[2])
if ARGV[1] == 'nx' and prev > 0 then
  return {0, prev}
end
if count == 0 then
  if prev > 0 then
    redis.call('DEL', KEYS[1])
    publish(ARGV[3], '*')
  end
  return {1, prev}
end
if prev > 0 then
  redis.call('HSET', KEYS[1], 'c', count)
else
  local t = redis.call('TIME')
  redis.call('HSET', KEYS[1], 'c', count, 'g', t[1] .. '.' .. t[2])
end
return {1, prev}
