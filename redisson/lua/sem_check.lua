-- Check a batch of Redisson RSemaphore permit holders of one slot: the
-- permits are not leased, so a holder holds them as long as the semaphore
-- exists. KEYS[i] a semaphore; the ARGV are ignored.
-- Returns, per key: 1 it exists, 0 gone, 2 holds another type.
local res = {}
for i, key in ipairs(KEYS) do
  local t = redis.call('TYPE', key).ok
  if t == 'string' then
    res[i] = 1
  elseif t == 'none' then
    res[i] = 0
  else
    res[i] = 2
  end
end
return res
