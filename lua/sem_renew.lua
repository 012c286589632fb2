-- Renew or check a batch of semaphore holders of one slot.
-- KEYS[i] holders zset; ARGV[2i-1] member, ARGV[2i] lease ms (0: check only).
-- Returns, per key: 1 the member holds its permits (renewed), 0 its lease
-- ran out or it was released, 2 the key holds something else.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local res = {}
for i, key in ipairs(KEYS) do
  local member, lease = ARGV[2 * i - 1], ARGV[2 * i]
  local s = redis.pcall('ZSCORE', key, member)
  if type(s) == 'table' and s.err then
    res[i] = 2
  elseif s == false or tonumber(s) <= now then
    res[i] = 0
  else
    if lease ~= '0' then
      lease = tonumber(lease)
      redis.call('ZADD', key, 'XX', now + lease, member)
      if redis.call('PTTL', key) < lease then
        redis.call('PEXPIRE', key, lease)
      end
    end
    res[i] = 1
  end
end
return res
