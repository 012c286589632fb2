-- Renew or check a batch of RWMutex read shares held in one slot.
-- KEYS[i] readers zset; ARGV[2i-1] reader id, ARGV[2i] lease ms (0: check
-- only). Returns, per key: 1 held (renewed), 0 gone or due, 2 the key holds
-- something else.
local now
local res = {}
for i, key in ipairs(KEYS) do
  local id, lease = ARGV[2 * i - 1], ARGV[2 * i]
  local s = redis.pcall('ZSCORE', key, id)
  if type(s) == 'table' then
    res[i] = 2
  elseif s == false then
    res[i] = 0
  else
    now = now or now_ms()
    if tonumber(s) <= now then
      res[i] = 0
    else
      if lease ~= '0' then
        redis.call('ZADD', key, 'XX', now + tonumber(lease), id)
        extend(key, lease)
      end
      res[i] = 1
    end
  end
end
return res
