-- Shared by every script: publish on the lock's channel, sharded where the
-- server has sharded pub/sub (Redis 7+), classic otherwise.
local function publish(channel, message)
  local r = redis.pcall('SPUBLISH', channel, message)
  if type(r) == 'table' and r.err then
    redis.call('PUBLISH', channel, message)
  end
end

local function now_ms(t)
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The field f of the hash at key, false when there is no key. For a key
-- that holds something else than a what (no such field), false and the
-- error reply for the script to return.
local function field_of(key, f, what)
  local v = redis.call('HGET', key, f)
  if v == false and redis.call('EXISTS', key) == 1 then
    return false, redis.error_reply('WRONGTYPE ' .. what .. ' key holds a hash that is not a ' .. what)
  end
  return v
end

-- A waiter id is its Client's id, ':' and a number.
local function client_of(id)
  return string.match(id, '^(.*):') or id
end

-- tell publishes a message for the waiter id alone: on its Client's own
-- channel of the lock, the lock's channel, ':' and the Client's id. Only
-- that Client hears it, however many others wait.
local function tell(channel, id, message)
  publish(channel .. ':' .. client_of(id), message)
end
