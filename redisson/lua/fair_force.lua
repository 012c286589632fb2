-- Force-unlock a Redisson RFairLock, as Redisson's fair forceUnlockAsync
-- does: delete the hash whoever holds it and tell the queue's head. A key
-- of another layout is left alone.
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] timeouts, KEYS[4] the lock's
-- channel. ARGV[1] publishing mode, ARGV[2] now ms.
-- Returns 1 when a lock was deleted, 0 when there was none.
local t, bad = rlock_layout(KEYS[1])
if bad then
  return bad
end
bad = rfair_layout(KEYS[2], KEYS[3])
if bad then
  return bad
end
rfair_purge(KEYS[2], KEYS[3], ARGV[2])
if t == 'none' then
  return 0
end
redis.call('DEL', KEYS[1])
rfair_notify(KEYS[2], KEYS[4], ARGV[1])
return 1
