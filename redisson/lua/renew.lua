-- Renew or check a batch of Redisson lock holders of one slot, as
-- Redisson's watchdog does (PEXPIRE while the owner's field exists).
-- KEYS[i] lock hash; ARGV[2i-1] owner field, ARGV[2i] lease ms (0: check).
-- Returns, per key: 1 held by the owner, 0 gone, 2 held by others or
-- overwritten.
local res = {}
for i, key in ipairs(KEYS) do
  local t = redis.call('TYPE', key).ok
  if t == 'hash' and redis.call('HEXISTS', key, ARGV[2 * i - 1]) == 1 then
    if ARGV[2 * i] ~= '0' then
      redis.call('PEXPIRE', key, ARGV[2 * i])
    end
    res[i] = 1
  elseif t == 'none' then
    res[i] = 0
  else
    res[i] = 2
  end
end
return res
