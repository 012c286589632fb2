-- Release one hold of a reentrant lock, or the whole ownership, and pass
-- the lock to the first waiter of its queue.
-- KEYS[1] lock hash (see the prelude), KEYS[2] queue zset, KEYS[3] waiters hash
-- ARGV[1] owner id, ARGV[2] hold field ("" releases every hold of the owner),
-- ARGV[3] fence retention ms, ARGV[4] channel, ARGV[5] (optional) a
-- number of tokens: keep the lock for local passes when nobody waits in
-- Redis (see release_last.lua)
-- Returns 1 when the lock is now free, 2 when the owner still holds it through
-- other holds, 0 when the owner does not hold it. Retrying a release whose
-- reply was lost returns the same answer: the hold is already gone, or the
-- lock remembers that this hold freed it.
-- owner, holds, token and last: lock_of, read in release_last.lua.
if owner == ARGV[1] then
  return release_hold(KEYS[1], holds, last, ARGV[2], ARGV[1], KEYS[2], KEYS[3], ARGV[4], ARGV[3])
end
if freed_by(KEYS[1], ARGV[1], ARGV[2]) then
  return 1
end
return 0
