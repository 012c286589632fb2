-- Take or re-enter the write lock of an RWMutex (keys: see rw_prelude.lua).
-- ARGV[1] owner id, ARGV[2] hold field, ARGV[3] lease ms, ARGV[4] fence
-- retention ms, ARGV[5] mode, ARGV[6] registration ms. Modes: 'n' waits (a
-- blocked writer registers as waiting, until ARGV[6] from now, which keeps
-- new readers out), 't' tries once, 'r' only re-enters the write lock ARGV[1]
-- holds.
-- Returns {1, token, holds} when held by ARGV[1] after the call; {0, ms}
-- when another writer, a reader or a reader's pass keeps it out, ms being
-- the time until the earliest of them expires; {-1} when 'r' finds the lock
-- not held by ARGV[1].
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local wo = writer()
local readers = live(KEYS[2], now)
purge(KEYS[3], now)
local last = tonumber(redis.call('HGET', KEYS[6], 't') or '0')
if wo == ARGV[1] then
  redis.call('HSET', KEYS[1], ARGV[2], '1')
  extend(KEYS[1], ARGV[3])
  return {1, redis.call('HGET', KEYS[1], 'token'), redis.call('HLEN', KEYS[1]) - 2}
end
if ARGV[5] == 'r' then
  return {-1}
end
local wait
if wo then
  wait = redis.call('PTTL', KEYS[1])
elseif readers > 0 then
  local _, at = earliest(KEYS[2])
  wait = at - now
elseif live(KEYS[5], now) > 0 then
  local _, at = earliest(KEYS[5])
  wait = at - now
end
if wait then
  if ARGV[5] == 'n' then
    redis.call('ZADD', KEYS[3], now + tonumber(ARGV[6]), ARGV[1])
    extend(KEYS[3], ARGV[6])
  end
  return {0, wait}
end
-- Write tokens: server microseconds, raised above the last token.
local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
if token <= last then
  token = last + 1
end
token = string.format('%d', token)
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, ARGV[2], '1')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('HSET', KEYS[6], 't', token)
redis.call('PEXPIRE', KEYS[6], ARGV[4])
return {1, token, 1}
