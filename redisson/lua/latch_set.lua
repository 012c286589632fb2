-- Set the count of a Redisson RCountDownLatch that has none, as Redisson's
-- trySetCount does, and publish its "new count" message "1".
-- KEYS[1] the latch, KEYS[2] its channel. ARGV[1] count, ARGV[2]
-- publishing mode. Returns 1 when set, 0 when it already had a count.
local v, bad = rcount_layout(KEYS[1], 'count-down latch')
if bad then
  return bad
end
if v ~= false then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
rpublish(KEYS[2], '1', ARGV[2])
return 1
