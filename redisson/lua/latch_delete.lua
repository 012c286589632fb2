-- Delete a Redisson RCountDownLatch, as Redisson's delete does, publishing
-- "1" to its channel. KEYS[1] the latch, KEYS[2] its channel. ARGV[1]
-- publishing mode. Returns 1 when it existed.
local _, bad = rcount_layout(KEYS[1], 'count-down latch')
if bad then
  return bad
end
if redis.call('DEL', KEYS[1]) == 1 then
  rpublish(KEYS[2], '1', ARGV[1])
  return 1
end
return 0
