-- Release every hold of a read or write owner of a Redisson read-write
-- lock, without a latch: a closing Client, an acquisition given up.
-- KEYS[1] the hash, KEYS[2] its channel. ARGV[1] owner field, ARGV[2]
-- publishing mode, ARGV[3] 'r' read, 'w' write.
-- Returns 1 when the owner held it, 0 otherwise.
local _, bad = rw_layout(KEYS[1])
if bad then
  return 0
end
local res
if ARGV[3] == 'w' then
  res = rw_write_release(KEYS[1], KEYS[2], ARGV[1], '0', true, ARGV[2])
else
  res = rw_read_release(KEYS[1], KEYS[2], ARGV[1], true, ARGV[2])
end
if res == nil then
  return 0
end
return 1
