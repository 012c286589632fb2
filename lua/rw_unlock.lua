-- Release one hold of an RWMutex's write lock, or every hold, or give up
-- waiting for it (keys: see rw_prelude.lua).
-- ARGV[1] owner id, ARGV[2] hold field ('' releases every hold), ARGV[3]
-- fence retention ms, ARGV[4] channel.
-- Returns 1 when the write lock is now free, 2 when the owner still holds it
-- through other holds, 0 when the owner does not hold it. A retried release
-- whose reply was lost returns the same answer (the fence hash remembers the
-- hold that freed the lock).
-- The readers that waited for the writer are let in first, with passes that
-- keep writers out until they used them, and all of them are woken by one
-- '*' message; without waiting readers, one waiting writer is woken.
local now = now_ms()
local wo = writer()
local queued = redis.call('ZREM', KEYS[3], ARGV[1])
local writers = live(KEYS[3], now)
local waiting = live(KEYS[4], now)
local mark = ARGV[1] .. ARGV[2]
if wo == ARGV[1] then
  if drop_hold(KEYS[1], KEYS[6], ARGV[2], mark, ARGV[3]) then
    return 2
  end
  if waiting > 0 then
    if live(KEYS[5], now) > 0 then
      redis.call('ZUNIONSTORE', KEYS[5], 2, KEYS[5], KEYS[4], 'AGGREGATE', 'MAX')
      redis.call('DEL', KEYS[4])
      local e = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')
      redis.call('PEXPIREAT', KEYS[5], tonumber(e[2]) + 1)
    else
      redis.call('RENAME', KEYS[4], KEYS[5])
    end
    publish(ARGV[4], '*')
  else
    wake_writer(ARGV[4], now)
  end
  return 1
end
if queued == 1 and writers == 0 and waiting > 0 then
  -- The last waiting writer gave up: the readers it kept out may go.
  publish(ARGV[4], '*')
end
if redis.call('HGET', KEYS[6], 'r') == mark then
  return 1
end
return 0
