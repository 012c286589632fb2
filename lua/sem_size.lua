-- Set or adjust the size of a semaphore.
-- KEYS: see sem_prelude.lua.
-- ARGV[1] "nx" (set only if it has none), "set" or "add"; ARGV[2] the size,
-- or the change for "add"; ARGV[3] the largest size allowed; ARGV[4] channel.
-- Returns {1, previous size, new size} when set; {0, size, size} when "nx"
-- found a size; {-1, size, rejected size} when "add" would leave it out of
-- 1..max; {-2} when "add" found no size. Previous size is 0 when there was
-- none. Waiters that can now take their permits, and waiters asking for
-- more than the new size, are woken.
local prev, used, bad = state()
if bad then return bad end
local v = tonumber(ARGV[2])
if ARGV[1] == 'nx' and prev ~= nil then
  return {0, prev, prev}
end
if ARGV[1] == 'add' then
  if prev == nil then
    return {-2}
  end
  v = prev + v
  if v < 1 or v > tonumber(ARGV[3]) then
    return {-1, prev, v}
  end
end
local now = now_ms()
if prev == nil then
  -- Holders that outlived their semaphore's size (a key evicted or
  -- deleted by hand) still count.
  redis.call('ZREMRANGEBYSCORE', H, '-inf', now)
  used = recount(now)
  redis.call('HSET', S, 'size', v, 'used', used)
else
  redis.call('HSET', S, 'size', v)
end
used = purge(now, used)
wake(ARGV[4], v, v - used, nil)
return {1, prev or 0, v}
