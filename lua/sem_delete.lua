-- Delete a semaphore: its size, holders and queue. Every waiter is woken
-- (it finds no size). Holders learn at their next renewal.
-- KEYS: see sem_prelude.lua. ARGV[1] channel.
-- Returns 1 when the semaphore had a size, 0 otherwise.
local size, _, bad = state()
if bad then return bad end
for _, m in ipairs(redis.call('ZRANGE', Q, 0, -1)) do
  wake_member(ARGV[1], m)
end
redis.call('DEL', S, H, Q, QT)
if size == nil then
  return 0
end
return 1
