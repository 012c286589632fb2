-- Force-unlock a Redisson RLock, as Redisson's forceUnlockAsync does: delete
-- the hash whoever holds it and publish the unlock message. A key of
-- another layout is left alone.
-- KEYS[1] lock hash, KEYS[2] its channel. ARGV[1] publishing mode.
-- Returns 1 when a lock was deleted, 0 when there was none.
local t, bad = rlock_layout(KEYS[1])
if bad then
  return bad
end
if t == 'none' then
  return 0
end
redis.call('DEL', KEYS[1])
rpublish(KEYS[2], '0', ARGV[1])
return 1
