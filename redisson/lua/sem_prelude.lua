-- Shared by the scripts of Redisson's RSemaphore and RCountDownLatch: a
-- string holding a number.

-- rcount_layout returns the integer key holds (false when it does not
-- exist), or an error reply when it holds something else.
local function rcount_layout(key, what)
  local t = redis.call('TYPE', key).ok
  if t == 'none' then
    return false
  end
  local s = t == 'string' and redis.call('GET', key)
  local v = s and string.match(s, '^%-?%d+$') and tonumber(s)
  if not v then
    return nil, redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. t .. ' that is not a number, not a Redisson ' .. what)
  end
  return v
end
