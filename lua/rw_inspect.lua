-- Read an RWMutex's state in one step (keys: see rw_prelude.lua).
-- Returns {writer owner or '', token or '0', write holds, writer pttl,
-- live read shares, ms until the last share expires, waiting writers}.
local now = now_ms()
local wo = writer()
local readers = redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')
local last = 0
if readers > 0 then
  local e = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  last = tonumber(e[2]) - now
end
local writers = redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf')
if wo == false then
  return {'', '0', 0, -2, readers, last, writers}
end
return {wo, redis.call('HGET', KEYS[1], 'token'), redis.call('HLEN', KEYS[1]) - 2, redis.call('PTTL', KEYS[1]), readers, last, writers}
