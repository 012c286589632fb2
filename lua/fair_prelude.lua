-- Shared by the fair lock's scripts: wake the first waiter still alive,
-- dropping the dead ones ahead of it; drop the queue when it is empty.
local function wake_head(queue, waiters, channel)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  while true do
    local h = redis.call('ZRANGE', queue, 0, 0)[1]
    if not h then
      redis.call('DEL', queue, waiters)
      return
    end
    if tonumber(redis.call('HGET', waiters, h) or '0') > now then
      publish(channel, 'w:' .. h)
      return
    end
    redis.call('ZREM', queue, h)
    redis.call('HDEL', waiters, h)
  end
end
