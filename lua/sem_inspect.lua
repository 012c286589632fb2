-- Read a semaphore's state in one step (dropping expired holders and
-- waiters first).
-- KEYS: see sem_prelude.lua.
-- Returns {size (0: none), used, {member, pttl, ...}, waiters, permits
-- waited for}.
local size, used, bad = state()
if bad then return bad end
if size == nil then
  return {0, 0, {}, 0, 0}
end
local now = now_ms()
local dropped
used, dropped = purge(now, used)
if dropped then
  wake(ARGV[1], size, size - used, nil)
end
local holders = {}
local hs = redis.call('ZRANGE', H, 0, -1, 'WITHSCORES')
for i = 1, #hs, 2 do
  holders[#holders + 1] = hs[i]
  holders[#holders + 1] = tonumber(hs[i + 1]) - now
end
local queued = redis.call('ZRANGE', Q, 0, -1)
local waiting = 0
for _, m in ipairs(queued) do
  waiting = waiting + permits(m)
end
return {size, used, holders, #queued, waiting}
