-- Delete a lock whoever holds it and hand it to the first waiter of its
-- queue.
-- KEYS[1] lock key, KEYS[2] fence key, KEYS[3] queue zset, KEYS[4] waiters hash;
-- ARGV[1] channel, ARGV[2] fence retention ms.
-- Returns 1 when a lock was deleted, 0 when there was none. A value the
-- library did not write is left alone. The fence keeps the owner it removed,
-- so that the holder can tell a forced unlock from an expiry.
local l, f = read_lock(KEYS[1], KEYS[2], KEYS[3])
if l == nil then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return redis.error_reply('WRONGTYPE lock key holds a value that is not a lock')
  end
  return 0
end
redis.call('DEL', KEYS[1])
f[4] = l[1]
free(KEYS[1], KEYS[2], KEYS[3], KEYS[4], f, ARGV[1], ARGV[2])
return 1
