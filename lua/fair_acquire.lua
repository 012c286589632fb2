-- Acquire, re-enter or queue for a fair (FIFO) lock.
-- KEYS[1] lock hash (as for the Mutex), KEYS[2] fence hash,
-- KEYS[3] queue zset, KEYS[4] waiters hash (see the prelude)
-- ARGV[1] owner id, ARGV[2] hold field, ARGV[3] lease ms, ARGV[4] fence retention ms,
-- ARGV[5] waiter id, ARGV[6] waiter expiry ms, ARGV[7] 'try' for a single
-- attempt (never queued), anything else otherwise ('first', 'queued', as for
-- acquire.lua: a taken lock dequeues the waiter whatever it says),
-- ARGV[8] the lease (ms) to hand the lock over with, '' to be woken instead.
-- Returns {1, token, holds} when held by ARGV[1] after the call, {0, wait
-- ms, held} otherwise: how long until something may change, and held 1 when
-- another owner holds the lock (wait is its remaining lease), 0 when it is
-- free but the queue's head is another live waiter (wait is until its
-- Client's deadline).
local t = redis.call('TIME')
local now = now_ms(t)

local owner, bad = field_of(KEYS[1], 'owner', 'lock')
if bad then return bad end
if owner == ARGV[1] then
  dequeue(KEYS[3], KEYS[4], ARGV[5])
  return reenter(KEYS[1], ARGV[2], ARGV[3])
end
local h, hd = first_live(KEYS[3], KEYS[4], t)
if owner == false and (h == nil or h == ARGV[5]) then
  local token = take(KEYS[1], KEYS[2], t, ARGV[4], ARGV[1], ARGV[2], ARGV[3])
  if h then
    -- The waiter is the head (nobody waits otherwise: nothing to leave).
    dequeue(KEYS[3], KEYS[4], ARGV[5])
  end
  return {1, token, 1}
end
local wait, held = hd - now, 0
if owner ~= false then
  wait, held = redis.call('PTTL', KEYS[1]), 1
end
if ARGV[7] == 'try' then
  return {0, wait, held}
end
enqueue(KEYS[3], KEYS[4], ARGV[5], tonumber(ARGV[6]), wait, ARGV[8], ARGV[2], ARGV[1])
return {0, wait, held}
