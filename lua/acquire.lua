-- Acquire or re-enter a reentrant lock.
-- KEYS[1] lock hash: owner, token, and one field per hold ("#<n>")
-- KEYS[2] fence hash: t = last token handed out, r = last hold that released
-- KEYS[3] queue zset, KEYS[4] waiters hash (see the prelude)
-- ARGV[1] owner id, ARGV[2] hold field, ARGV[3] lease ms, ARGV[4] fence retention ms,
-- ARGV[5] waiter id ('' for a waiter of '1' messages), ARGV[6] waiter expiry ms,
-- ARGV[7] 'try' for a single attempt (never queued), 'queued' when the
-- waiter may have a place in the queue, anything else otherwise,
-- ARGV[8] the lease (ms) to hand the lock over with, '' to be woken instead.
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
  local token = take(KEYS[1], KEYS[2], redis.call('TIME'), ARGV[4], ARGV[1], ARGV[2], ARGV[3])
  if ARGV[7] == 'queued' then
    dequeue(KEYS[3], KEYS[4], ARGV[5])
  end
  return {1, token, 1}
end
if owner == ARGV[1] then
  if ARGV[7] == 'queued' then
    dequeue(KEYS[3], KEYS[4], ARGV[5])
  end
  return reenter(KEYS[1], ARGV[2], ARGV[3])
end
local pttl = redis.call('PTTL', KEYS[1])
if ARGV[7] ~= 'try' then
  enqueue(KEYS[3], KEYS[4], ARGV[5], tonumber(ARGV[6]), pttl, ARGV[8], ARGV[2], ARGV[1])
end
return {0, pttl}
