-- The common case of fair_acquire.lua (which documents the keys and
-- arguments): a free lock, and nobody queued.
local owner, holds, token, last, bad = lock_of(KEYS[1])
if owner == false and not bad and redis.call('EXISTS', KEYS[2]) == 0 then
  return {1, take(KEYS[1], redis.call('TIME'), last, ARGV[1], ARGV[2], ARGV[3]), 1}
end
