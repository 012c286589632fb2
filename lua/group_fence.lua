-- Raise the fencing counters of locks held by their owners to a group's
-- token, so that every later ownership of any of them gets a greater token.
-- KEYS[i] lock hash of lock i (one slot).
-- ARGV[1] the token, ARGV[1+i] owner of lock i.
-- Returns, per lock, 1 when its owner holds it (its counter is now at least
-- the token), 0 when it does not (the counter is left alone).
local res = {}
local token = tonumber(ARGV[1])
for i, lock in ipairs(KEYS) do
  res[i] = 0
  local ok, owner, holds, held, last = pcall(lock_of, lock)
  if ok and owner == ARGV[1 + i] then
    if last < token then
      redis.call('HSET', lock, 't', ARGV[1])
    end
    res[i] = 1
  end
end
return res
