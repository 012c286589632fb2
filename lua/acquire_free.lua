-- The common case of acquire.lua (which documents the keys and arguments):
-- a free lock is taken here, and the call returns unless the waiter may
-- have a place in the queue to leave. A re-entry (ARGV[10]) never takes a
-- free lock: its parent's ownership ended.
local owner, holds, token, last, bad, queued = lock_of(KEYS[1], KEYS[2])
local took = owner == false and not bad and (ARGV[10] or '') == ''
local reserved = 0
if took then
  if ARGV[9] and ARGV[9] ~= '' then
    -- Tokens for the Client's local passes, written with the ownership.
    local t = redis.call('TIME')
    token = next_token(t, last)
    reserved = reservable(t, token, ARGV[9])
    give(KEYS[1], token, ARGV[1], ARGV[2], ARGV[3], nil, nil, queued and '1' or '', reserved)
  else
    token = take(KEYS[1], nil, last, ARGV[1], ARGV[2], ARGV[3], nil, nil, queued and '1' or '')
  end
  if ARGV[6] ~= 'queued' then
    return {1, token, 1, reserved}
  end
end
