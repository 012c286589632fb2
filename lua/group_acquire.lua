-- Acquire (or re-enter) every lock of a group, or none of them.
-- KEYS[4i-3] lock key of lock i, KEYS[4i-2] its fence key, KEYS[4i-1] its
-- queue, KEYS[4i] its waiters hash (the layout of acquire.lua); all keys live
-- in one slot.
-- ARGV[1] fence retention ms, ARGV[2] 'try' for a single attempt; for lock i:
-- ARGV[3i] owner id, ARGV[3i+1] hold field, ARGV[3i+2] lease ms.
-- Returns {1, T, token_1, ..., token_n} when every lock is held by its owner
-- after the call, or {0, pttl, i} when lock i, the first one another owner
-- holds, blocks the group (nothing is taken then; unless ARGV[2] is 'try',
-- the group then waits for a '1' message of lock i, see free in the prelude).
-- T, the group's token, is one token for every lock the call takes: greater
-- than the last token of each of them, and the fencing counter of every lock
-- of the group, re-entered ones included, is raised to it.
local n = #KEYS / 4
local locks, fences = {}, {}
for i = 1, n do
  local l, f = read_lock(KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1])
  if l == nil and redis.call('EXISTS', KEYS[4 * i - 3]) == 1 then
    return redis.error_reply('WRONGTYPE lock key holds a value that is not a lock')
  end
  if l and l[1] ~= ARGV[3 * i] then
    local pttl = redis.call('PTTL', KEYS[4 * i - 3])
    if ARGV[2] ~= 'try' then
      enqueue(KEYS[4 * i - 1], KEYS[4 * i], KEYS[4 * i - 2], f, ARGV[1], '', 0, pttl, '')
    end
    return {0, pttl, i}
  end
  locks[i], fences[i] = l, f
end
local t = redis.call('TIME')
local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
for i = 1, n do
  local last = tonumber(fences[i][1])
  if locks[i] == nil then
    if token <= last then
      token = last + 1
    end
  elseif token < last then
    token = last
  end
end
token = string.format('%d', token)
local res = {1, token}
for i = 1, n do
  local lock, fence = KEYS[4 * i - 3], KEYS[4 * i - 2]
  local hold, lease = ARGV[3 * i + 1], ARGV[3 * i + 2]
  local l, f = locks[i], fences[i]
  if l == nil then
    redis.call('SET', lock, ARGV[3 * i] .. ' ' .. token .. ' ' .. hold, 'PX', lease)
    res[i + 2] = token
  else
    res[i + 2] = reenter(lock, l, hold, lease)[2]
  end
  f[1] = token
  write_fence(fence, f, ARGV[1])
end
return res
