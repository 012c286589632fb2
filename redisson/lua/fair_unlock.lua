-- Release one hold (or, with ARGV[5] '1', every hold) of an owner of a
-- Redisson RFairLock, as Redisson's fair unlockInnerAsync does, with its
-- unlock latch; a lock freed, or found free, is told to the queue's head.
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] timeouts, KEYS[4] the lock's
-- channel (a waiter's is it, ':' and the waiter's id), KEYS[5] the
-- request's unlock latch. ARGV[1] lease ms, ARGV[2] owner field,
-- ARGV[3] latch ms, ARGV[4] publishing mode, ARGV[5] '1' to release every
-- hold, ARGV[6] now ms.
-- Returns 1 freed, 0 still held by the owner, nil not held.
local val = redis.call('GET', KEYS[5])
if val ~= false then
  return tonumber(val)
end
rfair_purge(KEYS[2], KEYS[3], ARGV[6])
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' then
  rfair_notify(KEYS[2], KEYS[4], ARGV[4])
  return nil
end
if t ~= 'hash' or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then
  return nil
end
local counter = 0
if ARGV[5] ~= '1' then
  counter = redis.call('HINCRBY', KEYS[1], ARGV[2], -1)
end
if counter > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[5], 0, 'PX', ARGV[3])
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[5], 1, 'PX', ARGV[3])
rfair_notify(KEYS[2], KEYS[4], ARGV[4])
return 1
