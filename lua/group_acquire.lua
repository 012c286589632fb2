-- Acquire (or re-enter) every lock of a group, or none of them.
-- KEYS[4i-3] lock hash of lock i, KEYS[4i-2] its fence hash, KEYS[4i-1] its
-- queue, KEYS[4i] its waiters hash (the layout of acquire.lua); all keys live
-- in one slot.
-- ARGV[1] fence retention ms, ARGV[2] 'try' for a single attempt; for lock i:
-- ARGV[3i] owner id, ARGV[3i+1] hold field, ARGV[3i+2] lease ms.
-- Returns {1, T, token_1, ..., token_n} when every lock is held by its owner
-- after the call, or {0, pttl, i} when lock i, the first one another owner
-- holds, blocks the group (nothing is taken then; unless ARGV[2] is 'try',
-- the group then waits for a '1' message of lock i, see wake_head).
-- T, the group's token, is one token for every lock the call takes: greater
-- than the last token of each of them, and the fencing counter of every lock
-- of the group, re-entered ones included, is raised to it.
local n = #KEYS / 4
local owners = {}
for i = 1, n do
  local lock = KEYS[4 * i - 3]
  local owner = redis.call('HGET', lock, 'owner')
  if owner == false then
    if redis.call('EXISTS', lock) == 1 then
      return redis.error_reply('WRONGTYPE lock key holds a hash that is not a lock')
    end
  elseif owner ~= ARGV[3 * i] then
    local pttl = redis.call('PTTL', lock)
    if ARGV[2] ~= 'try' then
      enqueue(KEYS[4 * i - 1], KEYS[4 * i], '', 0, pttl, '')
    end
    return {0, pttl, i}
  end
  owners[i] = owner
end
local t = redis.call('TIME')
local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
for i = 1, n do
  local last = tonumber(redis.call('HGET', KEYS[4 * i - 2], 't') or '0')
  if owners[i] == false then
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
  if owners[i] == false then
    redis.call('HSET', lock, 'owner', ARGV[3 * i], 'token', token, hold, '1')
    redis.call('PEXPIRE', lock, lease)
    res[i + 2] = token
  else
    redis.call('HSET', lock, hold, '1')
    if redis.call('PTTL', lock) < tonumber(lease) then
      redis.call('PEXPIRE', lock, lease)
    end
    res[i + 2] = redis.call('HGET', lock, 'token')
  end
  redis.call('HSET', fence, 't', token)
  redis.call('PEXPIRE', fence, ARGV[1])
end
return res
