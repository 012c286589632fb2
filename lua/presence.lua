-- Renew one Client's deadline in the queues of several locks of one slot:
-- its waiters there stay alive (see the prelude).
-- KEYS[3i-2] waiters hash, KEYS[3i-1] queue zset, KEYS[3i] lock key of lock i.
-- ARGV[1] the Client's id; for lock i: ARGV[3i-1] waiter expiry ms,
-- ARGV[3i] '1' to refresh the keys' expiry as well, '2' when the Client's
-- own HSET has just written its fields (a plain renewal found them gone:
-- the script gives the hash its expiry, or drops it if nobody waits, and
-- answers gone), '0' otherwise, ARGV[3i+1] the holder's
-- owner id the Client read at its last pass ('' for none).
-- Returns {gone, pttl, mine, owner}, per lock:
--   gone  1 when places of the Client may be gone: it had no deadline, or
--         a release dropped a place of it as dead since (the field
--         "\0a<client id>" was gone, see lock_queue.lua), or the queue is
--         gone: its waiters must look again; 0 otherwise.
--   pttl  the holder's remaining lease (PTTL), -2 when the lock is free or
--         its key is not a lock. A lock that waiters wait for is free (-2) only for
--         a moment (a release hands it over, or wakes the head), and its
--         lease runs out unrenewed only when its holder died, such as the
--         waiter of another Client it went to: nothing is published then.
--         -3 when the holder is the one the Client read at its last pass:
--         the Client knows when that one's lease ran out at the latest, and
--         looks then.
--   mine  the holder's owner id when it is of this Client (a lock handed
--         over to one of its waiters, whose message may have been lost),
--         '' otherwise.
--   owner the holder's owner id when pttl was read, '' otherwise.
local now = now_ms(redis.call('TIME'))
local field, alive = '\0c' .. ARGV[1], '\0a' .. ARGV[1]
local res, pttl, mine, owners = {}, {}, {}, {}
for i = 1, #KEYS / 3 do
  local waiters, queue, lock = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local expiry = tonumber(ARGV[3 * i - 1])
  local added = redis.call('HSET', waiters, field, now + expiry, alive, '')
  if ARGV[3 * i] == '2' then
    added = 1
  end
  res[i] = math.min(added, 1)
  if added > 0 and redis.call('EXISTS', queue) == 0 then
    -- Nobody waits any more: the hash is this call's.
    redis.call('DEL', waiters)
  elseif added > 0 or ARGV[3 * i] == '1' then
    -- A hash this call may have made has no expiry yet.
    redis.call('PEXPIRE', waiters, queue_keep * expiry)
    redis.call('PEXPIRE', queue, queue_keep * expiry)
  end
  local ok, owner = pcall(lock_of, lock)
  if ok and owner then
    if owner == ARGV[3 * i + 1] then
      pttl[i], owners[i] = -3, ''
    else
      pttl[i], owners[i] = redis.call('PTTL', lock), owner
    end
    mine[i] = client_of(owner) == ARGV[1] and owner or ''
  else
    pttl[i], mine[i], owners[i] = -2, '', ''
  end
end
return {res, pttl, mine, owners}
