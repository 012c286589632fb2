-- Shared by every script: publish on the lock's channel, sharded where the
-- server has sharded pub/sub (Redis 7+), classic otherwise.
local function publish(channel, message)
  local r = redis.pcall('SPUBLISH', channel, message)
  if type(r) == 'table' and r.err then
    redis.call('PUBLISH', channel, message)
  end
end
