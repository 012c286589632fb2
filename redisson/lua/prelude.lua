-- Shared by the scripts of the Redisson layouts. how is the publishing
-- mode: 'c' classic PUBLISH, 's' sharded SPUBLISH, 'b' both.
local function rpublish(channel, message, how)
  if how ~= 's' then
    redis.call('PUBLISH', channel, message)
  end
  if how ~= 'c' then
    redis.call('SPUBLISH', channel, message)
  end
end

-- rholder returns a holder's field of the lock hash at key (any field but
-- a read-write lock's 'mode'), false when it has none: what an attempt
-- that found the lock taken reports, for the error of a wait that ends.
local function rholder(key)
  for _, f in ipairs(redis.call('HKEYS', key)) do
    if f ~= 'mode' then
      return f
    end
  end
  return false
end

-- rlock_layout returns an error reply when key is not the hash of a
-- Redisson RLock (RFencedLock, RFairLock): another type, or the hash of a
-- Redisson read-write lock (field mode). It returns the key's type.
local function rlock_layout(key)
  local t = redis.call('TYPE', key).ok
  if t ~= 'none' and t ~= 'hash' then
    return t, redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. t .. ', not the hash of a Redisson lock')
  end
  if t == 'hash' and redis.call('HEXISTS', key, 'mode') == 1 then
    return t, redis.error_reply('WRONGTYPE ' .. key .. ' holds a Redisson read-write lock, not a Redisson lock')
  end
  return t
end

-- A re-entry (mode 'r'; any other mode is no re-entry) claims its
-- parent's ownership as Redis has it: one more hold of owner, the parent
-- holder's field of the hash at key, only while held (the hash is in the
-- state its holder holds it in) and the field is there. Otherwise it is
-- refused, and must not take the lock or queue: {-1, why}, why 0 when the
-- lock is free, 2 when others hold it. nil when the call may go on.
local function rlock_reentry_refused(mode, key, held, owner)
  if mode ~= 'r' or (held and redis.call('HEXISTS', key, owner) == 1) then
    return nil
  end
  if held then
    return {-1, 2}
  end
  return {-1, 0}
end
