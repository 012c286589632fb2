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
  local v = redis.pcall('HMGET', lock, 'owner', 'token', 't')
  if not v.err and v[1] == ARGV[1 + i] then
    if math.max(tonumber(v[2] or '0'), tonumber(v[3] or '0')) < token then
      redis.call('HSET', lock, 't', ARGV[1])
    end
    res[i] = 1
  end
end
return res
