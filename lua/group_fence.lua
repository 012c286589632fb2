-- Raise the fencing counters of locks held by their owners to a group's
-- token, so that every later ownership of any of them gets a greater token.
-- KEYS[2i-1] lock hash of lock i, KEYS[2i] its fence hash (one slot).
-- ARGV[1] the token, ARGV[2] fence retention ms, ARGV[2+i] owner of lock i.
-- Returns, per lock, 1 when its owner holds it (its counter is now at least
-- the token), 0 when it does not (the counter is left alone).
local res = {}
local token = tonumber(ARGV[1])
for i = 1, #KEYS / 2 do
  local lock, fence = KEYS[2 * i - 1], KEYS[2 * i]
  res[i] = 0
  if redis.pcall('HGET', lock, 'owner') == ARGV[2 + i] then
    if tonumber(redis.call('HGET', fence, 't') or '0') < token then
      redis.call('HSET', fence, 't', ARGV[1])
    end
    redis.call('PEXPIRE', fence, ARGV[2])
    res[i] = 1
  end
end
return res
