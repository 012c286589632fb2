-- Break an RWMutex whoever holds it: the writer and every read share (keys:
-- see rw_prelude.lua). Waiting writers and readers stay registered; they are
-- woken. ARGV[1] channel. Returns 1 when something held it, 0 otherwise.
local now = now_ms()
local wo = writer()
local readers = live(KEYS[2], now)
live(KEYS[3], now)
local waiting = live(KEYS[4], now)
live(KEYS[5], now)
if wo == false and readers == 0 then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[5])
if waiting > 0 then
  publish(ARGV[1], '*')
end
wake_writer(ARGV[1], now)
return 1
