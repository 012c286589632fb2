-- Count a Redisson RCountDownLatch down by one, as Redisson's countDown
-- does: at zero the key goes and its "zero" message "0" is published.
-- KEYS[1] the latch, KEYS[2] its channel. ARGV[1] publishing mode.
-- Returns the count after (0 when the latch had none).
local v, bad = rcount_layout(KEYS[1], 'count-down latch')
if bad then
  return bad
end
if v == false then
  return 0
end
local n = redis.call('DECR', KEYS[1])
if n <= 0 then
  redis.call('DEL', KEYS[1])
end
if n == 0 then
  rpublish(KEYS[2], '0', ARGV[1])
end
return math.max(n, 0)
