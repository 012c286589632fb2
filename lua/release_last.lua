-- The common case of release.lua (which documents the keys and arguments):
-- the owner's last hold released, nobody waiting.
local v = redis.call('HMGET', KEYS[1], 'owner', 'holds', 'token', 't', 'r')
if v[1] == ARGV[1] and (ARGV[2] == '' or v[2] == ARGV[2]) and redis.call('EXISTS', KEYS[2]) == 0 then
  free(KEYS[1], ARGV[3], 'r', ARGV[1] .. ARGV[2])
  return 1
end
