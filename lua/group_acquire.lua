-- Acquire (or re-enter) every lock of a group, or none of them.
-- KEYS[3i-2] lock hash of lock i, KEYS[3i-1] its queue, KEYS[3i] its
-- waiters hash (the layout of acquire.lua); all keys live in one slot.
-- ARGV[1] 'try' for a single attempt; for lock i: ARGV[3i-1] owner id,
-- ARGV[3i] hold field, ARGV[3i+1] lease ms; ARGV[3n+1+i] (optional) the
-- token of the ownership lock i re-enters, '' when it is no re-entry (see
-- reentry_refused).
-- Returns {1, T, token_1, ..., token_n} when every lock is held by its owner
-- after the call, or {0, pttl, i} when lock i, the first one another owner
-- holds, blocks the group (nothing is taken then; unless ARGV[1] is 'try',
-- the group then waits for a '1' message of lock i, see vacate), or
-- {-1, why, i} when the re-entry of lock i is refused (reentry_refused;
-- nothing is taken then either).
-- T, the group's token, is one token for every lock the call takes: greater
-- than the last token of each of them, and the fencing counter of every lock
-- of the group, re-entered ones included, is raised to it.
local n = #KEYS / 3
local locks = {}
for i = 1, n do
  local lock = KEYS[3 * i - 2]
  local owner, holds, token, last, bad, queued = lock_of(lock, KEYS[3 * i - 1])
  if bad then
    return bad
  end
  local refused = reentry_refused(lock, owner, token, ARGV[3 * i - 1], ARGV[3 * n + 1 + i])
  if refused then
    return {-1, refused[2], i}
  end
  if owner ~= false and owner ~= ARGV[3 * i - 1] then
    local pttl = redis.call('PTTL', lock)
    if ARGV[1] ~= 'try' then
      enqueue(not queued and lock, KEYS[3 * i - 1], KEYS[3 * i], '', 0, pttl, '')
    end
    return {0, pttl, i}
  end
  locks[i] = {owner = owner, holds = holds, token = token, last = last, queued = queued}
end
local t = redis.call('TIME')
local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
for i = 1, n do
  local last = locks[i].last
  if locks[i].owner == false then
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
  local lock, l = KEYS[3 * i - 2], locks[i]
  local hold, lease = ARGV[3 * i], ARGV[3 * i + 1]
  if l.owner == false then
    give(lock, token, ARGV[3 * i - 1], hold, lease, nil, nil, l.queued and '1' or '')
    res[i + 2] = token
  else
    reenter(lock, l.holds, l.token, hold, lease)
    if tonumber(token) > l.last then
      redis.call('HSET', lock, 't', token)
    end
    res[i + 2] = l.token
  end
end
return res
