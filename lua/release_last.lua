-- The common case of release.lua (which documents the keys and arguments):
-- the owner's last hold released, nobody waiting (q, see lock.lua).
local owner, holds, token, last, bad, queued = lock_of(KEYS[1])
if owner == ARGV[1] and (ARGV[2] == '' or holds == ARGV[2]) and not queued then
  free(KEYS[1], ARGV[3], 'r', ARGV[1] .. ARGV[2])
  return 1
end
