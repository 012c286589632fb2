-- Acquire (or re-enter) every lock of a group, or none of them.
-- KEYS[2i-1] lock hash of lock i, KEYS[2i] its fence hash (the layout of
-- acquire.lua); all keys live in one slot.
-- ARGV[1] fence retention ms; for lock i: ARGV[3i-1] owner id, ARGV[3i] hold
-- field, ARGV[3i+1] lease ms.
-- Returns {1, T, token_1, ..., token_n} when every lock is held by its owner
-- after the call, or {0, pttl, i} when lock i, the first one another owner
-- holds, blocks the group (nothing is taken then).
-- T, the group's token, is one token for every lock the call takes: greater
-- than the last token of each of them, and the fencing counter of every lock
-- of the group, re-entered ones included, is raised to it.
local n = #KEYS / 2
local owners = {}
for i = 1, n do
  local lock = KEYS[2 * i - 1]
  local owner = redis.call('HGET', lock, 'owner')
  if owner == false then
    if redis.call('EXISTS', lock) == 1 then
      return redis.error_reply('WRONGTYPE lock key holds a hash that is not a lock')
    end
  elseif owner ~= ARGV[3 * i - 1] then
    return {0, redis.call('PTTL', lock), i}
  end
  owners[i] = owner
end
local t = redis.call('TIME')
local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
for i = 1, n do
  local last = tonumber(redis.call('HGET', KEYS[2 * i], 't') or '0')
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
  local lock, fence = KEYS[2 * i - 1], KEYS[2 * i]
  local hold, lease = ARGV[3 * i], ARGV[3 * i + 1]
  if owners[i] == false then
    redis.call('HSET', lock, 'owner', ARGV[3 * i - 1], 'token', token, hold, '1')
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
