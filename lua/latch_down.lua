-- Count a latch down by one.
-- KEYS[1] latch hash (see latch_set.lua); ARGV[1] channel.
-- Returns the count left. At 0 the key is deleted and every waiter woken;
-- an open latch stays open (0).
local c, bad = field_of(KEYS[1], 'c', 'latch')
if c == false then
  return bad or 0
end
local n = redis.call('HINCRBY', KEYS[1], 'c', -1)
if n <= 0 then
  redis.call('DEL', KEYS[1])
  publish(ARGV[1], '*')
  return 0
end
return n
