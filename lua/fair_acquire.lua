-- Acquire, re-enter or queue for a fair (FIFO) lock.
-- KEYS[1] lock hash (as for the Mutex), KEYS[2] fence hash,
-- KEYS[3] queue zset (waiter id -> arrival number),
-- KEYS[4] waiters hash (waiter id -> deadline in server ms; "\0n" -> last arrival number)
-- ARGV[1] owner id, ARGV[2] hold field, ARGV[3] lease ms, ARGV[4] fence retention ms,
-- ARGV[5] waiter id, ARGV[6] waiter expiry ms, ARGV[7] "1" for a single attempt (never queues)
-- Returns {1, token, holds} when held by ARGV[1] after the call, {0, wait ms}
-- otherwise: how long until something may change (the holder's lease runs
-- out, or the waiter ahead of us expires).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- The first waiter still alive; dead ones ahead of it leave the queue.
local function head()
  while true do
    local h = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if not h then
      return nil, 0
    end
    local d = tonumber(redis.call('HGET', KEYS[4], h) or '0')
    if d > now then
      return h, d
    end
    redis.call('ZREM', KEYS[3], h)
    redis.call('HDEL', KEYS[4], h)
  end
end

local function leave(id)
  redis.call('ZREM', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
  if redis.call('ZCARD', KEYS[3]) == 0 then
    redis.call('DEL', KEYS[3], KEYS[4])
  end
end

local owner = redis.call('HGET', KEYS[1], 'owner')
if owner == ARGV[1] then
  redis.call('HSET', KEYS[1], ARGV[2], '1')
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  leave(ARGV[5])
  return {1, redis.call('HGET', KEYS[1], 'token'), redis.call('HLEN', KEYS[1]) - 2}
end
if owner == false and redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('WRONGTYPE lock key holds a hash that is not a lock')
end
local h, hd = head()
if owner == false and (h == nil or h == ARGV[5]) then
  local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('HGET', KEYS[2], 't') or '0')
  if token <= last then
    token = last + 1
  end
  token = string.format('%d', token)
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, ARGV[2], '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  if redis.call('HSET', KEYS[2], 't', token) == 1 then
    redis.call('PEXPIRE', KEYS[2], ARGV[4])
  end
  leave(ARGV[5])
  return {1, token, 1}
end
local wait
if owner ~= false then
  wait = redis.call('PTTL', KEYS[1])
else
  wait = hd - now
end
if ARGV[7] == '1' then
  return {0, wait}
end
if redis.call('ZSCORE', KEYS[3], ARGV[5]) == false then
  redis.call('ZADD', KEYS[3], redis.call('HINCRBY', KEYS[4], '\0n', 1), ARGV[5])
end
redis.call('HSET', KEYS[4], ARGV[5], now + tonumber(ARGV[6]))
-- The queue lives as long as a waiter keeps coming back.
redis.call('PEXPIRE', KEYS[3], ARGV[6])
redis.call('PEXPIRE', KEYS[4], ARGV[6])
return {0, wait}
