-- The common case of fair_acquire.lua (which documents the keys and
-- arguments): a free lock, and nobody queued (q, see lock.lua); not for a
-- re-entry (ARGV[10]), whose parent's ownership ended then.
local owner, holds, token, last, bad, queued = lock_of(KEYS[1], KEYS[2])
if owner == false and not bad and not queued and (ARGV[10] or '') == '' then
  return {1, take(KEYS[1], nil, last, ARGV[1], ARGV[2], ARGV[3]), 1}
end
