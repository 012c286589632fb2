-- Renew or check a batch of Redisson RPermitExpirableSemaphore permit
-- holders of one slot.
-- KEYS[i] a permits zset; ARGV[2i-1] the holder's permit ids, joined by
-- ','; ARGV[2i] lease ms (0: check only).
-- Returns, per key: 1 every permit is held (each now expires a lease from
-- now), 0 one of them was released, reclaimed or has expired, 2 the key
-- holds something else.
local now = psem_now()
local res = {}
for i, key in ipairs(KEYS) do
  local t = redis.call('TYPE', key).ok
  if t ~= 'none' and t ~= 'zset' then
    res[i] = 2
  else
    local ok, ids = t == 'zset', {}
    for hex in string.gmatch(ARGV[2 * i - 1], '%x+') do
      if not ok then
        break
      end
      local id = psem_id(hex)
      local s = redis.call('ZSCORE', key, id)
      ok = s and tonumber(s) > now
      table.insert(ids, id)
    end
    local lease = tonumber(ARGV[2 * i])
    if ok and lease > 0 then
      for _, id in ipairs(ids) do
        redis.call('ZADD', key, 'XX', now + lease, id)
      end
    end
    res[i] = ok and 1 or 0
  end
end
return res
