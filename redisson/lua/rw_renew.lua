-- Renew or check a batch of holders of Redisson read-write locks of one
-- slot, as Redisson's watchdog does: a writer's hash gets the lease again;
-- a reader's read hold keys each get the lease again (one that has
-- expired is set again), and the hash at least the lease.
-- KEYS[i] the hash; ARGV[2i-1] owner field (ending in ':write' for a
-- writer), ARGV[2i] lease ms (0: check).
-- Returns, per key: 1 held by the owner, 0 gone, 2 held by others or
-- overwritten; -n held by a reader, the hash found with n ms to live, set
-- by a reader of a shorter lease (rw_shorter): its holder is renewed at a
-- third of it from then on.
local res = {}
for i, key in ipairs(KEYS) do
  local owner, lease = ARGV[2 * i - 1], ARGV[2 * i]
  local t = redis.call('TYPE', key).ok
  local holds = t == 'hash' and tonumber(redis.call('HGET', key, owner))
  if holds then
    res[i] = 1
    if lease ~= '0' then
      if string.sub(owner, -6) ~= ':write' then
        local shorter = rw_shorter(key, lease)
        if shorter > 0 then
          res[i] = -shorter
        end
        local prefix = rw_timeout(key, owner)
        for c = 1, holds do
          redis.call('SET', prefix .. c, 1, 'PX', lease)
        end
      end
      redis.call('PEXPIRE', key, math.max(redis.call('PTTL', key), tonumber(lease)))
    end
  elseif t == 'none' then
    res[i] = 0
  else
    res[i] = 2
  end
end
return res
