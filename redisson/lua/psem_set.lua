-- Set the permits of a Redisson RPermitExpirableSemaphore, as Redisson's
-- trySetPermits, setPermits and addPermits do, and publish the permits
-- available when they are more than none.
-- KEYS[1] the semaphore, KEYS[2] its permits zset, KEYS[3] its channel.
-- ARGV[1] publishing mode, ARGV[2] 'try' (set the available permits when
-- the semaphore has no value), 'set' (make available and acquired permits
-- add up to ARGV[3]) or 'add' (add ARGV[3], which may be negative),
-- ARGV[3] permits.
-- Returns 1 set or 0 not (try), or the permits available after.
local v, bad = psem_layout(KEYS[1], KEYS[2])
if bad then
  return bad
end
local n = tonumber(ARGV[3])
if ARGV[2] == 'try' then
  if v ~= false then
    return 0
  end
  redis.call('SET', KEYS[1], ARGV[3])
  if n > 0 then
    rpublish(KEYS[3], ARGV[3], ARGV[1])
  end
  return 1
end
local left
if ARGV[2] == 'set' and v == false then
  redis.call('SET', KEYS[1], ARGV[3])
  left = n
elseif ARGV[2] == 'set' then
  local total = v + redis.call('ZCARD', KEYS[2])
  if total == n then
    return v
  end
  left = redis.call('INCRBY', KEYS[1], n - total)
else
  left = redis.call('INCRBY', KEYS[1], n)
end
if left > 0 then
  rpublish(KEYS[3], tostring(left), ARGV[1])
end
return left
