-- Release every hold of an owner of a Redisson RLock, without a latch: a
-- closing Client, an acquisition given up.
-- KEYS[1] lock hash, KEYS[2] its channel. ARGV[1] owner field, ARGV[2]
-- publishing mode. Returns 1 when it freed the lock, 0 otherwise.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('DEL', KEYS[1])
rpublish(KEYS[2], '0', ARGV[2])
return 1
