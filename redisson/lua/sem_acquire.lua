-- Take permits of a Redisson RSemaphore, as Redisson's tryAcquire does.
-- KEYS[1] the semaphore. ARGV[1] permits.
-- Returns {1, available after} when taken, {0, available} (-1 when the
-- semaphore has no value) when not.
local v, bad = rcount_layout(KEYS[1], 'semaphore')
if bad then
  return bad
end
if v ~= false and v >= tonumber(ARGV[1]) then
  return {1, redis.call('DECRBY', KEYS[1], ARGV[1])}
end
return {0, v or -1}
