-- Renew one Client's deadline in the queues of several locks of one slot:
-- its waiters there stay alive (see the prelude).
-- KEYS[3i-2] waiters hash, KEYS[3i-1] queue zset, KEYS[3i] lock key of lock i.
-- ARGV[1] the Client's field ("\0c<client id>"); for lock i: ARGV[2i]
-- waiter expiry ms, ARGV[2i+1] '1' to refresh the keys' expiry as well.
-- Returns {gone, pttl}: per lock, gone 1 when the Client had no deadline
-- (it was taken for dead and its places may be gone, or the queue is gone):
-- its waiters must look again, 0 otherwise; and the holder's remaining
-- lease, -2 when the lock is free (see lease_left). A lock
-- that waiters wait for is free (-2) only for a moment (a release hands it
-- over, or wakes the head), and its lease runs out unrenewed only when its
-- holder died, such as the waiter of another Client it went to: nothing is
-- published then.
local now = now_ms(redis.call('TIME'))
local res, pttl = {}, {}
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
  pttl[i] = lease_left(lock)
end
return {res, pttl}
