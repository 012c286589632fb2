-- Force-unlock a Redisson read-write lock, as Redisson's forceUnlock of
-- its read or write lock does (whichever mode it is in): delete the hash
-- whoever holds it and publish that mode's unlock message ('0' read, '1'
-- write). A key of another layout is left alone.
-- KEYS[1] the hash, KEYS[2] its channel. ARGV[1] publishing mode.
-- Returns 1 when a lock was deleted, 0 when there was none.
local mode, bad = rw_layout(KEYS[1])
if bad then
  return bad
end
if mode == false then
  return 0
end
redis.call('DEL', KEYS[1])
if mode == 'write' then
  rpublish(KEYS[2], '1', ARGV[1])
else
  rpublish(KEYS[2], '0', ARGV[1])
end
return 1
