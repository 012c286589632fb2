-- Acquire or re-enter a reentrant lock.
-- KEYS[1] lock hash (see the prelude), KEYS[2] queue zset, KEYS[3] waiters hash
-- ARGV[1] owner id, ARGV[2] hold field, ARGV[3] lease ms,
-- ARGV[4] waiter id ('' for a waiter of '1' messages), ARGV[5] waiter expiry ms,
-- ARGV[6] 'try' for a single attempt (never queued), 'queued' when the
-- waiter may have a place in the queue, anything else otherwise,
-- ARGV[7] the lease (ms) to hand the lock over with, '' to be woken instead,
-- ARGV[8] '1' when the waiter's Client has no other waiter on the lock,
-- ARGV[9] (optional) a number n of tokens to reserve after the token of a
-- free lock taken here, or of a lock a release hands over to the waiter,
-- for the Client's local passes ('' for none); fewer are reserved when that
-- would pass the server's clock in microseconds (reserve_tokens),
-- ARGV[10] (optional) for a re-entry, the token of the parent's ownership
-- ('' otherwise): see reentry_refused.
-- Returns {1, token, holds, reserved} when held by ARGV[1] after the call
-- (reserved: the tokens after token reserved for the waiter, for a lock
-- taken free or handed over; 0 or none for a re-entry),
-- {0, pttl, 1, last, now, holder} when another owner holds the lock: its
-- remaining lease, the last token handed out, and the server's clock in ms
-- and the holder's owner id (not in 'try' mode: {0, pttl, 1, last}); the
-- waiter is queued then; {-1, why} when a re-entry is refused
-- (reentry_refused).
-- owner, holds, token, last, bad and queued: lock_of, read in
-- acquire_free.lua, which took a free lock (took) and returned unless the
-- waiter was queued.
if bad then
  return bad
end
if took then
  dequeue(KEYS[2], KEYS[3], ARGV[4])
  return {1, token, 1, reserved}
end
local refused = reentry_refused(KEYS[1], owner, token, ARGV[1], ARGV[10])
if refused then
  return refused
end
if owner == ARGV[1] then
  local r = reenter(KEYS[1], holds, token, ARGV[2], ARGV[3])
  if ARGV[6] == 'queued' then
    -- Handed over by a release: with the tokens it reserved, if any.
    dequeue(KEYS[2], KEYS[3], ARGV[4])
    r[4] = last - tonumber(token)
  end
  return r
end
local pttl = redis.call('PTTL', KEYS[1])
if ARGV[6] == 'try' then
  return {0, pttl, 1, last}
end
local now = enqueue(not queued and KEYS[1], KEYS[2], KEYS[3], ARGV[4], tonumber(ARGV[5]), pttl, ARGV[7], ARGV[2], ARGV[1], ARGV[6] == 'first', ARGV[8] == '1', ARGV[9])
return {0, pttl, 1, last, now, owner}
