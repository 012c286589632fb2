-- Free a lock whoever holds it and pass it to the first waiter of its
-- queue.
-- KEYS[1] lock hash, KEYS[2] queue zset, KEYS[3] waiters hash;
-- ARGV[1] channel, ARGV[2] fence retention ms.
-- Returns 1 when a lock was held, 0 when there was none. A value the
-- library did not write is left alone. The lock keeps the owner it removed
-- (field 'f'), so that the holder can tell a forced unlock from an expiry.
local owner, holds, token, last, bad = lock_of(KEYS[1])
if owner == false then
  return bad or 0
end
vacate(KEYS[1], last, KEYS[2], KEYS[3], ARGV[1], ARGV[2], 'f', owner)
return 1
