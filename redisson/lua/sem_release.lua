-- Give permits back to a Redisson RSemaphore (or add them, or take them
-- away with a negative count), as Redisson's release and addPermits do,
-- and publish the permits available. With ARGV[3] '1' a semaphore that no
-- longer exists is left alone (a lease's permits of a deleted semaphore).
-- KEYS[1] the semaphore, KEYS[2] its channel. ARGV[1] permits,
-- ARGV[2] publishing mode, ARGV[3] '1' only if it exists.
-- Returns the permits available, or nil when left alone.
local v, bad = rcount_layout(KEYS[1], 'semaphore')
if bad then
  return bad
end
if v == false and ARGV[3] == '1' then
  return nil
end
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
rpublish(KEYS[2], tostring(n), ARGV[2])
return n
