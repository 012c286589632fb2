-- Delete a lock whoever holds it and wake a waiter.
-- KEYS[1] lock hash; ARGV[1] channel. Returns 1 when a lock was deleted, 0
-- when there was none. A value the library did not write is left alone.
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner == false then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return redis.error_reply('WRONGTYPE lock key holds a hash that is not a lock')
  end
  return 0
end
redis.call('DEL', KEYS[1])
publish(ARGV[1], '1')
return 1
