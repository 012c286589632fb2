-- A waiter gives up its place in the queue of a lock.
-- KEYS[1] lock hash, KEYS[2] queue zset, KEYS[3] waiters hash
-- ARGV[1] waiter id, ARGV[2] channel, ARGV[3] the waiter's owner id,
-- ARGV[4] its hold field, ARGV[5] fence retention ms
-- A lock handed over to the waiter meanwhile is given back, and when the
-- lock is free, it goes to the waiter now at the head.
dequeue(KEYS[2], KEYS[3], ARGV[1])
local v = redis.pcall('HMGET', KEYS[1], 'owner', 'holds', 'token', 't')
if v.err then
  return 0
end
local last = math.max(tonumber(v[3] or '0'), tonumber(v[4] or '0'))
if v[1] then
  if v[1] ~= ARGV[3] then
    return 0
  end
  local rest, found = without_hold(v[2] or '', ARGV[4])
  if not found then
    return 0
  end
  if rest ~= '' then
    redis.call('HSET', KEYS[1], 'holds', rest)
    return 1
  end
elseif v[3] == false and redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
vacate(KEYS[1], last, KEYS[2], KEYS[3], ARGV[2], ARGV[5])
return 1
