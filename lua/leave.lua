-- A waiter gives up its place in the queue of a lock.
-- KEYS[1] lock key, KEYS[2] fence key, KEYS[3] queue zset, KEYS[4] waiters hash
-- ARGV[1] waiter id, ARGV[2] channel, ARGV[3] the waiter's owner id,
-- ARGV[4] its hold field, ARGV[5] fence retention ms
-- A lock handed over to the waiter meanwhile is given back, and when the
-- lock is free, it goes to the waiter now at the head. Keys the library did
-- not write are left alone.
local ok, l, f = pcall(read_lock, KEYS[1], KEYS[2], KEYS[3])
if not ok then
  dequeue(KEYS[3], KEYS[4], {}, ARGV[1])
  return 0
end
local queued = f[2]
dequeue(KEYS[3], KEYS[4], f, ARGV[1])
if l and l[1] == ARGV[3] and drop_hold(l, ARGV[4]) then
  if #l > 2 then
    redis.call('SET', KEYS[1], table.concat(l, ' '), 'KEEPTTL')
  else
    redis.call('DEL', KEYS[1])
    free(KEYS[1], KEYS[2], KEYS[3], KEYS[4], f, ARGV[2], ARGV[5])
    return 1
  end
elseif l == nil and f[2] == '1' and redis.call('EXISTS', KEYS[1]) == 0 then
  free(KEYS[1], KEYS[2], KEYS[3], KEYS[4], f, ARGV[2], ARGV[5])
  return 1
end
if f[2] ~= queued then
  write_fence(KEYS[2], f, ARGV[5])
end
if l and l[1] ~= ARGV[3] then
  return 0
end
return 1
