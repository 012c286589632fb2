-- Release one hold (or, with ARGV[5] '1', every hold) of a read or write
-- owner of a Redisson read-write lock; the unlock latch answers a retried
-- request with its first result, as in Redisson.
-- KEYS[1] the hash, KEYS[2] its channel, KEYS[3] the request's latch.
-- ARGV[1] lease ms, ARGV[2] owner field, ARGV[3] latch ms, ARGV[4]
-- publishing mode, ARGV[5] '1' for every hold, ARGV[6] 'r' read, 'w' write.
-- Returns 1 the owner holds no more, 0 it still holds, nil not held.
local val = redis.call('GET', KEYS[3])
if val ~= false then
  return tonumber(val)
end
local _, bad = rw_layout(KEYS[1])
if bad then
  return nil
end
local res
if ARGV[6] == 'w' then
  res = rw_write_release(KEYS[1], KEYS[2], ARGV[2], ARGV[1], ARGV[5] == '1', ARGV[4])
else
  res = rw_read_release(KEYS[1], KEYS[2], ARGV[2], ARGV[5] == '1', ARGV[4])
end
if res ~= nil then
  redis.call('SET', KEYS[3], res, 'PX', ARGV[3])
end
return res
