-- Take an owner of a Redisson RFairLock off its queue and release every
-- hold it has, without a latch: a closing Client, an acquisition given up
-- or whose outcome is unknown. The queue's head is told when the lock is
-- free.
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] timeouts, KEYS[4] the lock's
-- channel. ARGV[1] owner field, ARGV[2] publishing mode, ARGV[3] now ms,
-- ARGV[4] the owner's wait ms ('' when it did not queue).
-- Returns 1 when it freed the lock, 0 otherwise.
if redis.call('TYPE', KEYS[2]).ok == 'list' and redis.call('TYPE', KEYS[3]).ok == 'zset' then
  local wait = nil
  if ARGV[4] ~= '' then
    wait = ARGV[4]
  end
  rfair_leave(KEYS[2], KEYS[3], ARGV[1], wait)
  rfair_purge(KEYS[2], KEYS[3], ARGV[3])
end
local t = redis.call('TYPE', KEYS[1]).ok
local freed = 0
if t == 'hash' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('DEL', KEYS[1])
  freed = 1
  t = 'none'
end
if t == 'none' and redis.call('TYPE', KEYS[2]).ok == 'list' then
  rfair_notify(KEYS[2], KEYS[4], ARGV[2])
end
return freed
