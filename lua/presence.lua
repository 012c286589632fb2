-- Renew one Client's deadline in the queues of several locks of one slot:
-- its waiters there stay alive (see the prelude).
-- KEYS[2i-1] waiters hash, KEYS[2i] queue zset of lock i.
-- ARGV[1] the Client's field ("\0c<client id>"); for lock i: ARGV[2i]
-- waiter expiry ms, ARGV[2i+1] '1' to refresh the keys' expiry as well.
-- Returns, per lock, 1 when the Client had no deadline there (it was taken
-- for dead and its places may be gone, or the queue is gone): its waiters
-- must look again. 0 otherwise.
local now = now_ms(redis.call('TIME'))
local res = {}
for i = 1, #KEYS / 2 do
  local waiters, queue = KEYS[2 * i - 1], KEYS[2 * i]
  local expiry = tonumber(ARGV[2 * i])
  res[i] = redis.call('HSET', waiters, ARGV[1], now + expiry)
  if res[i] == 1 and redis.call('EXISTS', queue) == 0 then
    -- Nobody waits any more: the hash is this call's.
    redis.call('DEL', waiters)
  elseif ARGV[2 * i + 1] == '1' then
    redis.call('PEXPIRE', waiters, queue_keep * expiry)
    redis.call('PEXPIRE', queue, queue_keep * expiry)
  end
end
return res
