-- The common case of acquire.lua (which documents the keys and arguments):
-- a free lock is taken here, and the call returns unless the waiter may
-- have a place in the queue to leave.
local owner, holds, token, last, bad, queued = lock_of(KEYS[1], KEYS[2])
local took = owner == false and not bad
local reserved
if took then
  local t = redis.call('TIME')
  token = next_token(t, last)
  -- Reserve the tokens after this one for the Client's local passes, as
  -- many as asked but none above the server's clock in microseconds, so
  -- that tokens stay below it (see next_token): the next token of another
  -- owner comes after them (t, see lock.lua).
  reserved = math.min(tonumber(ARGV[9] ~= nil and ARGV[9] ~= '' and ARGV[9] or '0'), tonumber(micros(t)) - tonumber(token))
  if reserved > 0 then
    give(KEYS[1], token, ARGV[1], ARGV[2], ARGV[3], 't', string.format('%d', tonumber(token) + reserved), queued and '1' or '')
  else
    reserved = 0
    give(KEYS[1], token, ARGV[1], ARGV[2], ARGV[3], nil, nil, queued and '1' or '')
  end
  if ARGV[6] ~= 'queued' then
    return {1, token, 1, reserved}
  end
end
