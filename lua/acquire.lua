-- Acquire or re-enter a reentrant lock.
-- KEYS[1] lock key, KEYS[2] fence key (see the prelude), KEYS[3] queue zset,
-- KEYS[4] waiters hash
-- ARGV[1] owner id, ARGV[2] hold field, ARGV[3] lease ms, ARGV[4] fence retention ms,
-- ARGV[5] waiter id ('' for a waiter of '1' messages), ARGV[6] waiter expiry ms,
-- ARGV[7] 'try' for a single attempt (never queued), 'queued' when the
-- waiter may have a place in the queue, anything else otherwise,
-- ARGV[8] the lease (ms) to hand the lock over with, '' to be woken instead.
-- Returns {1, token, holds} when held by ARGV[1] after the call,
-- {0, pttl} when another owner holds the lock; the waiter is queued then.
local l, f = read_lock(KEYS[1], KEYS[2], KEYS[3])
local queued = ARGV[7] == 'queued' and f[2] == '1'
if l == nil then
  local token = take(KEYS[1], f, redis.call('TIME'), ARGV[1], ARGV[2], ARGV[3])
  if queued then
    dequeue(KEYS[3], KEYS[4], f, ARGV[5])
  end
  write_fence(KEYS[2], f, ARGV[4])
  return {1, token, 1}
end
if l[1] == ARGV[1] then
  if queued then
    dequeue(KEYS[3], KEYS[4], f, ARGV[5])
    write_fence(KEYS[2], f, ARGV[4])
  end
  return reenter(KEYS[1], l, ARGV[2], ARGV[3])
end
local pttl = redis.call('PTTL', KEYS[1])
if ARGV[7] ~= 'try' then
  enqueue(KEYS[3], KEYS[4], KEYS[2], f, ARGV[4], ARGV[5], tonumber(ARGV[6]), pttl, ARGV[8], ARGV[2], ARGV[1])
end
return {0, pttl}
