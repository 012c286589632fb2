-- Return the permits of a holder, or take a waiter out of the queue (both:
-- whatever the member is).
-- KEYS: see sem_prelude.lua. ARGV[1] member, ARGV[2] channel.
-- Returns 1 when the member held permits, which are available again, 0 when
-- it held none (released before, its lease ran out, the semaphore was
-- deleted). Waiters that can now take their permits are woken.
local member = ARGV[1]
local size, used, bad = state()
if bad then return bad end
if size == nil then
  leave(member)
  local score = redis.call('ZSCORE', H, member)
  redis.call('ZREM', H, member)
  if score and tonumber(score) > now_ms() then
    return 1
  end
  return 0
end
local dropped
used, dropped = purge(now_ms(), used)
local held = 0
if redis.call('ZREM', H, member) == 1 then
  used = used - permits(member)
  redis.call('HSET', S, 'used', used)
  held = 1
end
if leave(member) == 1 or held == 1 or dropped then
  wake(ARGV[2], size, size - used, nil)
end
return held
