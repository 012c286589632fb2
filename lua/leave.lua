-- A waiter gives up its place in the queue of a lock.
-- KEYS[1] lock hash, KEYS[2] queue zset, KEYS[3] waiters hash
-- ARGV[1] waiter id, ARGV[2] channel
-- When the lock is free, the new head of the queue is woken.
dequeue(KEYS[2], KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  wake_head(KEYS[2], KEYS[3], ARGV[2])
end
return 1
