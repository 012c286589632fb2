-- A waiter gives up its place in the queue of a lock.
-- KEYS[1] lock hash, KEYS[2] queue zset, KEYS[3] waiters hash
-- ARGV[1] waiter id, ARGV[2] channel, ARGV[3] the waiter's owner id,
-- ARGV[4] its hold field, ARGV[5] fence retention ms
-- A lock handed over to the waiter meanwhile is given back, and when the
-- lock is free, it goes to the waiter now at the head.
-- A key that is not a lock is left alone.
dequeue(KEYS[2], KEYS[3], ARGV[1])
local ok, owner, holds, token, last, bad = pcall(lock_of, KEYS[1])
if not ok or bad then
  return 0
end
if owner then
  if owner ~= ARGV[3] then
    return 0
  end
  local rest, found = without_hold(holds, ARGV[4])
  if not found then
    return 0
  end
  if rest ~= '' then
    redis.call('HSET', KEYS[1], 'holds', rest)
    return 1
  end
end
vacate(KEYS[1], last, KEYS[2], KEYS[3], ARGV[2], ARGV[5])
return 1
