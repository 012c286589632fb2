-- Release one hold (or, with ARGV[5] '1', every hold) of an owner of a
-- Redisson RLock, as Redisson's unlockInnerAsync does (3.24.1 and later):
-- the unlock latch answers a retried request with its first result.
-- KEYS[1] lock hash, KEYS[2] its channel, KEYS[3] the request's unlock
-- latch. ARGV[1] lease ms, ARGV[2] owner field, ARGV[3] latch ms,
-- ARGV[4] publishing mode, ARGV[5] '1' to release every hold.
-- Returns 1 freed, 0 still held by the owner, nil not held.
local val = redis.call('GET', KEYS[3])
if val ~= false then
  return tonumber(val)
end
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then
  return nil
end
local counter = 0
if ARGV[5] ~= '1' then
  counter = redis.call('HINCRBY', KEYS[1], ARGV[2], -1)
end
if counter > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[3], 0, 'PX', ARGV[3])
  return 0
end
redis.call('DEL', KEYS[1])
rpublish(KEYS[2], '0', ARGV[4])
redis.call('SET', KEYS[3], 1, 'PX', ARGV[3])
return 1
