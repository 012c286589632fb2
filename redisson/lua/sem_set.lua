-- Set the permits of a Redisson RSemaphore that has none yet, as
-- Redisson's trySetPermits does, and publish them.
-- KEYS[1] the semaphore, KEYS[2] its channel. ARGV[1] permits,
-- ARGV[2] publishing mode.
-- Returns 1 when set, 0 when it already had a value.
local v, bad = rcount_layout(KEYS[1], 'semaphore')
if bad then
  return bad
end
if v ~= false then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
rpublish(KEYS[2], ARGV[1], ARGV[2])
return 1
