-- Renew one Client's deadline in the queues of several locks of one slot:
-- its waiters there stay alive (see the prelude).
-- KEYS[3i-2] waiters hash, KEYS[3i-1] queue zset, KEYS[3i] lock key of lock i.
-- ARGV[1] the Client's field ("\0c<client id>"); for lock i: ARGV[2i]
-- waiter expiry ms, ARGV[2i+1] '1' to refresh the keys' expiry as well.
-- Returns, per lock, 0 when nothing changed for the Client's waiters, and
-- otherwise why they must look again: 1 when the Client had no deadline
-- (it was taken for dead and its places may be gone, or the queue is gone),
-- 2 when the lock is free. A lock is free while waiters wait only for a
-- moment (a release hands it over or wakes the head), unless the waiter of
-- another Client it went to died: nothing is published then.
local now = now_ms(redis.call('TIME'))
local res = {}
for i = 1, #KEYS / 3 do
  local waiters, queue, lock = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local expiry = tonumber(ARGV[2 * i])
  res[i] = redis.call('HSET', waiters, ARGV[1], now + expiry)
  if res[i] == 1 and redis.call('EXISTS', queue) == 0 then
    -- Nobody waits any more: the hash is this call's.
    redis.call('DEL', waiters)
  elseif ARGV[2 * i + 1] == '1' then
    redis.call('PEXPIRE', waiters, queue_keep * expiry)
    redis.call('PEXPIRE', queue, queue_keep * expiry)
  end
  if res[i] == 0 and redis.call('EXISTS', lock) == 0 then
    res[i] = 2
  end
end
return res
