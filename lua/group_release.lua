-- Release one hold (or the whole ownership) of each of several locks of one
-- slot, as release.lua does for one.
-- KEYS[3i-2] lock hash of lock i, KEYS[3i-1] its queue, KEYS[3i] its
-- waiters hash.
-- ARGV[1] fence retention ms; for lock i: ARGV[3i-1] owner id, ARGV[3i] hold
-- field ("" releases every hold of the owner), ARGV[3i+1] channel.
-- Returns, per lock, 1 when it is now free, 2 when the owner still holds it
-- through other holds, 0 when the owner does not hold it. A key holding
-- something else than a lock is not the owner's: 0.
local res = {}
for i = 1, #KEYS / 3 do
  local lock = KEYS[3 * i - 2]
  local owner, hold = ARGV[3 * i - 1], ARGV[3 * i]
  local ok, cur, holds, token, last = pcall(lock_of, lock)
  if not ok then
    res[i] = 0
  elseif cur == owner then
    res[i] = release_hold(lock, holds, last, hold, owner, KEYS[3 * i - 1], KEYS[3 * i], ARGV[3 * i + 1], ARGV[1])
  elseif freed_by(lock, owner, hold) then
    res[i] = 1
  else
    res[i] = 0
  end
end
return res
