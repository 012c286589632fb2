-- The common case of release.lua (which documents the keys and arguments):
-- the owner's last hold released, nobody waiting (q, see lock.lua). With
-- ARGV[5], the owner keeps the lock instead, for its Client's goroutines
-- that wait for it, and gets ARGV[5] more tokens for their local passes
-- (reserve_tokens): {3, from, n}, the tokens from + 1 to from + n.
local owner, holds, token, last, bad, queued = lock_of(KEYS[1])
if owner == ARGV[1] and (ARGV[2] == '' or holds == ARGV[2]) and not queued then
  if ARGV[5] and ARGV[5] ~= '' then
    local n = reserve_tokens(KEYS[1], redis.call('TIME'), last, ARGV[5])
    if n > 0 then
      return {3, last, n}
    end
  end
  free(KEYS[1], ARGV[3], 'r', ARGV[1] .. ARGV[2])
  return 1
end
