-- Take a read share of an RWMutex (keys: see rw_prelude.lua).
-- ARGV[1] reader id, ARGV[2] lease ms, ARGV[3] mode, ARGV[4] parent,
-- ARGV[5] registration ms. Modes: 'n' waits (a blocked reader registers as
-- waiting, until ARGV[5] from now), 't' tries once, 'r' re-enters beside the
-- live read share ARGV[4], 'd' downgrades: reads beside the write lock held
-- by ARGV[4].
-- Returns {1, epoch} when granted, epoch being the last write token handed
-- out ('0' when none is remembered); {0, ms} when a writer holds the lock or
-- waits for it, ms being the time until its earliest expiry; {-1} when the
-- parent of 'r' or 'd' no longer holds.
local now = now_ms()
local wo = writer()
purge(KEYS[2], now)
local id, mode = ARGV[1], ARGV[3]
if mode == 'r' then
  if not redis.call('ZSCORE', KEYS[2], ARGV[4]) then
    return {-1}
  end
elseif mode == 'd' then
  if wo ~= ARGV[4] then
    return {-1}
  end
else
  local wait
  if wo then
    wait = redis.call('PTTL', KEYS[1])
  elseif redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf') > 0
    and due(redis.call('ZSCORE', KEYS[5], id), now) then
    -- Writer preference: a waiting writer keeps new readers out, unless a
    -- writer's release gave this one a pass.
    purge(KEYS[3], now)
    local _, at = earliest(KEYS[3])
    wait = at - now
  end
  if wait then
    if mode == 'n' then
      purge(KEYS[4], now)
      redis.call('ZADD', KEYS[4], now + tonumber(ARGV[5]), id)
      extend(KEYS[4], ARGV[5])
    end
    return {0, wait}
  end
end
-- Every key's type is checked before the share is written.
local epoch = redis.call('HGET', KEYS[6], 't') or '0'
redis.call('ZREM', KEYS[4], id)
redis.call('ZREM', KEYS[5], id)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), id)
extend(KEYS[2], ARGV[2])
return {1, epoch}
