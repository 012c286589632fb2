-- Release one hold of a reentrant lock, or the whole ownership, and hand
-- the lock to (or wake) the first waiter of its queue.
-- KEYS[1] lock key, KEYS[2] fence key, KEYS[3] queue zset, KEYS[4] waiters hash
-- ARGV[1] owner id, ARGV[2] hold field ("" releases every hold of the owner),
-- ARGV[3] fence retention ms, ARGV[4] channel
-- Returns 1 when the lock is now free, 2 when the owner still holds it through
-- other holds, 0 when the owner does not hold it. Retrying a release whose
-- reply was lost returns the same answer: the hold is already gone, or the
-- fence remembers that this hold freed the lock.
local l, f = read_lock(KEYS[1], KEYS[2], KEYS[3])
local mark = ARGV[1] .. ARGV[2]
if l and l[1] == ARGV[1] then
  if ARGV[2] ~= '' then
    -- A hold already gone (a retry) leaves the others.
    if not drop_hold(l, ARGV[2]) then
      return 2
    end
    if #l > 2 then
      redis.call('SET', KEYS[1], table.concat(l, ' '), 'KEEPTTL')
      return 2
    end
  end
  redis.call('DEL', KEYS[1])
  f[3] = mark
  free(KEYS[1], KEYS[2], KEYS[3], KEYS[4], f, ARGV[4], ARGV[3])
  return 1
end
if f[3] == mark then
  return 1
end
return 0
