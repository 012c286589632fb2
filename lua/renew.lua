-- Renew or check a batch of leases held in one slot.
-- KEYS[i] lock hash; ARGV[2i-1] owner id, ARGV[2i] lease ms (0: check only).
-- Returns, per key: 1 held by the owner (renewed), 0 gone or free, 2 held
-- by another owner or overwritten with something else.
local res = {}
for i, key in ipairs(KEYS) do
  local ok, owner, holds, token, last, bad = pcall(lock_of, key)
  if ok and owner == ARGV[2 * i - 1] then
    if ARGV[2 * i] ~= '0' then
      redis.call('PEXPIRE', key, ARGV[2 * i])
    end
    res[i] = 1
  elseif ok and owner == false and not bad then
    res[i] = 0
  else
    res[i] = 2
  end
end
return res
