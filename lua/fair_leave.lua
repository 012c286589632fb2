-- A waiter gives up its place in the queue of a fair lock.
-- KEYS[1] lock hash, KEYS[2] queue zset, KEYS[3] waiters hash
-- ARGV[1] waiter id, ARGV[2] channel
-- When the lock is free, the new head of the queue is woken.
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  wake_head(KEYS[2], KEYS[3], ARGV[2])
elseif redis.call('ZCARD', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[2], KEYS[3])
end
return 1
