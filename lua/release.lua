-- Release one hold of a reentrant lock, or the whole ownership, and wake
-- the first waiter of its queue.
-- KEYS[1] lock hash, KEYS[2] fence hash, KEYS[3] queue zset, KEYS[4] waiters hash
-- ARGV[1] owner id, ARGV[2] hold field ("" releases every hold of the owner),
-- ARGV[3] fence retention ms, ARGV[4] channel
-- Returns 1 when the lock is now free, 2 when the owner still holds it through
-- other holds, 0 when the owner does not hold it. Retrying a release whose
-- reply was lost returns the same answer: the hold is already gone, or the
-- fence hash remembers that this hold freed the lock.
local owner = redis.call('HGET', KEYS[1], 'owner')
local mark = ARGV[1] .. ARGV[2]
if owner == ARGV[1] then
  if drop_hold(KEYS[1], KEYS[2], ARGV[2], mark, ARGV[3]) then
    return 2
  end
  wake_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[4], ARGV[3])
  return 1
end
if redis.call('HGET', KEYS[2], 'r') == mark then
  return 1
end
return 0
