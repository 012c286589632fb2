-- Acquire or re-enter a reentrant lock.
-- KEYS[1] lock hash: owner, token, and one field per hold ("#<n>")
-- KEYS[2] fence hash: t = last token handed out, r = last hold that released
-- KEYS[3] queue zset, KEYS[4] waiters hash (see wake_head)
-- ARGV[1] owner id, ARGV[2] hold field, ARGV[3] lease ms, ARGV[4] fence retention ms,
-- ARGV[5] waiter id ('' for a waiter of '1' messages), ARGV[6] waiter expiry ms,
-- ARGV[7] 'try' for a single attempt (never queued), 'queued' when the
-- waiter may have a place in the queue, anything else otherwise.
-- Returns {1, token, holds} when held by ARGV[1] after the call,
-- {0, pttl} when another owner holds the lock; the waiter is queued then.
local owner = false
if redis.call('EXISTS', KEYS[1]) == 1 then
  owner = redis.call('HGET', KEYS[1], 'owner')
  if owner == false then
    return redis.error_reply('WRONGTYPE lock key holds a hash that is not a lock')
  end
end
if owner == false then
  -- Tokens are server microseconds, or one more than the last token when the
  -- clock has not moved past it: strictly increasing while the fence hash
  -- lives, and afterwards as long as the clock never steps back further than
  -- the retention.
  local t = redis.call('TIME')
  local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('HGET', KEYS[2], 't') or '0')
  if token <= last then
    token = last + 1
  end
  token = string.format('%d', token)
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, ARGV[2], '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  -- Every writer of the fence hash gives it an expiry: only a new one
  -- needs it here.
  if redis.call('HSET', KEYS[2], 't', token) == 1 then
    redis.call('PEXPIRE', KEYS[2], ARGV[4])
  end
  if ARGV[7] == 'queued' then
    dequeue(KEYS[3], KEYS[4], ARGV[5])
  end
  return {1, token, 1}
end
if owner == ARGV[1] then
  redis.call('HSET', KEYS[1], ARGV[2], '1')
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  if ARGV[7] == 'queued' then
    dequeue(KEYS[3], KEYS[4], ARGV[5])
  end
  return {1, redis.call('HGET', KEYS[1], 'token'), redis.call('HLEN', KEYS[1]) - 2}
end
local pttl = redis.call('PTTL', KEYS[1])
if ARGV[7] ~= 'try' then
  enqueue(KEYS[3], KEYS[4], ARGV[5], tonumber(ARGV[6]), pttl)
end
return {0, pttl}
