-- Delete a lock whoever holds it and hand it to the first waiter of its
-- queue.
-- KEYS[1] lock hash, KEYS[2] fence hash, KEYS[3] queue zset, KEYS[4] waiters hash;
-- ARGV[1] channel, ARGV[2] fence retention ms.
-- Returns 1 when a lock was deleted, 0 when there was none. A value the
-- library did not write is left alone. The fence hash keeps the owner it
-- removed (field 'f'), so that the holder can tell a forced unlock from an
-- expiry.
local owner, bad = field_of(KEYS[1], 'owner', 'lock')
if owner == false then
  return bad or 0
end
redis.call('HSET', KEYS[2], 'f', owner)
if redis.call('PTTL', KEYS[2]) < 0 then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
redis.call('DEL', KEYS[1])
wake_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2])
return 1
