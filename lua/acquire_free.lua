-- The common case of acquire.lua (which documents the keys and arguments):
-- a free lock is taken here, and the call returns unless the waiter may
-- have a place in the queue to leave.
local owner, holds, token, last, bad, queued = lock_of(KEYS[1], KEYS[2])
local took = owner == false and not bad
local reserved = 0
if took then
  local t
  if ARGV[9] and ARGV[9] ~= '' then
    t = redis.call('TIME')
  end
  token = take(KEYS[1], t, last, ARGV[1], ARGV[2], ARGV[3], nil, nil, queued and '1' or '')
  if t then
    reserved = reserve_tokens(KEYS[1], t, token, ARGV[9])
  end
  if ARGV[6] ~= 'queued' then
    return {1, token, 1, reserved}
  end
end
