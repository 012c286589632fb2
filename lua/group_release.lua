-- Release one hold (or the whole ownership) of each of several locks of one
-- slot, as release.lua does for one.
-- KEYS[4i-3] lock hash of lock i, KEYS[4i-2] its fence hash, KEYS[4i-1] its
-- queue, KEYS[4i] its waiters hash.
-- ARGV[1] fence retention ms; for lock i: ARGV[3i-1] owner id, ARGV[3i] hold
-- field ("" releases every hold of the owner), ARGV[3i+1] channel.
-- Returns, per lock, 1 when it is now free, 2 when the owner still holds it
-- through other holds, 0 when the owner does not hold it. A key holding
-- something else than a lock is not the owner's: 0.
local res = {}
for i = 1, #KEYS / 4 do
  local lock, fence = KEYS[4 * i - 3], KEYS[4 * i - 2]
  local owner, hold = ARGV[3 * i - 1], ARGV[3 * i]
  local mark = owner .. hold
  local cur = redis.pcall('HGET', lock, 'owner')
  if cur == owner then
    if drop_hold(lock, fence, hold, mark, ARGV[1]) then
      res[i] = 2
    else
      wake_head(lock, fence, KEYS[4 * i - 1], KEYS[4 * i], ARGV[3 * i + 1], ARGV[1])
      res[i] = 1
    end
  elseif redis.pcall('HGET', fence, 'r') == mark then
    res[i] = 1
  else
    res[i] = 0
  end
end
return res
