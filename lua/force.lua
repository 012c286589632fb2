-- Delete a lock whoever holds it and wake a waiter.
-- KEYS[1] lock hash; ARGV[1] channel. Returns 1 when a lock was deleted.
if redis.call('DEL', KEYS[1]) == 1 then
  publish(ARGV[1], '1')
  return 1
end
return 0
