-- A waiter gives up its place in the queue of a lock.
-- KEYS[1] lock hash, KEYS[2] fence hash, KEYS[3] queue zset, KEYS[4] waiters hash
-- ARGV[1] waiter id, ARGV[2] channel, ARGV[3] the waiter's owner id,
-- ARGV[4] its hold field, ARGV[5] fence retention ms
-- A lock handed over to the waiter meanwhile is given back, and when the
-- lock is free, it goes to the waiter now at the head.
dequeue(KEYS[3], KEYS[4], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.pcall('HGET', KEYS[1], 'owner') ~= ARGV[3] or redis.call('HDEL', KEYS[1], ARGV[4]) == 0 then
    return 0
  end
  if redis.call('HLEN', KEYS[1]) > 2 then
    return 1
  end
  redis.call('DEL', KEYS[1])
end
wake_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[5])
return 1
