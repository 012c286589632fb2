-- Release a read share of an RWMutex (keys: see rw_prelude.lua), or give up
-- waiting for one. ARGV[1] reader id, ARGV[2] channel.
-- Returns 1 when the share was held, 0 when it was not (released before,
-- expired, or never granted). When the last share goes, one waiting writer
-- is woken.
local now = now_ms()
local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
local held = s and tonumber(s) > now
local gone = redis.call('ZREM', KEYS[2], ARGV[1]) + redis.call('ZREM', KEYS[4], ARGV[1]) + redis.call('ZREM', KEYS[5], ARGV[1])
if gone > 0 then
  wake_writer(ARGV[2], now)
end
if held then
  return 1
end
return 0
