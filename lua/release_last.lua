-- The common case of release.lua (which documents the keys and arguments):
-- the owner's last hold released, nobody waiting.
local owner, holds, token, last = lock_of(KEYS[1])
if owner == ARGV[1] and (ARGV[2] == '' or holds == ARGV[2]) and redis.call('EXISTS', KEYS[2]) == 0 then
  free(KEYS[1], ARGV[3], 'r', ARGV[1] .. ARGV[2])
  return 1
end
