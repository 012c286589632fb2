-- Read the number of a Redisson RSemaphore or RCountDownLatch.
-- KEYS[1] the key. ARGV[1] what it is, for the error.
-- Returns {1, number, PTTL} when it exists, {0, 0, -2} when it does not.
local v, bad = rcount_layout(KEYS[1], ARGV[1])
if bad then
  return bad
end
if v == false then
  return {0, 0, -2}
end
return {1, v, redis.call('PTTL', KEYS[1])}
