-- Shared by the scripts of Redisson's read-write lock (RReadWriteLock):
-- the hash NAME with the field mode ('read' or 'write'), a field
-- UUID:THREADID per reader (its read holds) and UUID:THREADID:write for
-- the writer (its write holds); one key
-- {NAME}:UUID:THREADID:rwlock_timeout:N per read hold, the hold's lease as
-- its expiry; the hash's expiry is the longest of them.

-- rw_layout returns the mode of the read-write lock at key (false when it
-- does not exist), or an error reply when key is something else: another
-- type, or a Redisson lock hash without the field mode.
local function rw_layout(key)
  local t = redis.call('TYPE', key).ok
  if t == 'none' then
    return false
  end
  if t ~= 'hash' then
    return nil, redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. t .. ', not a Redisson read-write lock')
  end
  local mode = redis.call('HGET', key, 'mode')
  if mode ~= 'read' and mode ~= 'write' then
    return nil, redis.error_reply('WRONGTYPE ' .. key .. ' is a hash without a read or write mode, not a Redisson read-write lock')
  end
  return mode
end

-- rw_timeout is the prefix of the read hold keys of owner, to which the
-- hold's number is appended (Redisson's suffixName).
local function rw_timeout(key, owner)
  local prefix = '{' .. key .. '}'
  if string.find(key, '{', 1, true) then
    prefix = key
  end
  return prefix .. ':' .. owner .. ':rwlock_timeout:'
end

-- rw_shorter returns how long the hash at key has to live (ms) when that
-- is less than half of lease, the lease of a reader about to renew it; 0
-- otherwise. A Redisson reader's renewal sets the shared hash's expiry to
-- its own lease, whatever it was: a reader renewed every third of lease
-- finds the hash about two thirds of lease from its end when it alone set
-- it, so less than half was set by a reader with a shorter lease, at least
-- as long as what is left. One it does not report, of half of lease or
-- more, outlasts the reader's next renewal: the hash cannot expire under
-- the reader while it lives.
local function rw_shorter(key, lease)
  local pttl = redis.call('PTTL', key)
  if pttl > 0 and pttl < tonumber(lease) / 2 then
    return pttl
  end
  return 0
end

-- rw_read_release releases one read hold of owner (every hold when all),
-- as Redisson's read unlock does: the hold's key goes, the hash lives on
-- as long as the longest read hold left, and the last reader's release
-- deletes it and publishes '0'. Returns 1 when owner holds no read hold
-- any more, 0 when it still does, nil when it held none.
local function rw_read_release(key, channel, owner, all, how)
  local mode = redis.call('HGET', key, 'mode')
  if mode == false then
    rpublish(channel, '0', how)
    return nil
  end
  local holds = tonumber(redis.call('HGET', key, owner))
  if holds == nil then
    return nil
  end
  local prefix = rw_timeout(key, owner)
  local counter = 0
  if all then
    for i = 1, holds do
      redis.call('DEL', prefix .. i)
    end
  else
    counter = redis.call('HINCRBY', key, owner, -1)
    redis.call('DEL', prefix .. (counter + 1))
  end
  if counter <= 0 then
    redis.call('HDEL', key, owner)
  end
  local gone = 0
  if counter <= 0 then
    gone = 1
  end
  if redis.call('HLEN', key) > 1 then
    local remain = -3
    for _, f in ipairs(redis.call('HKEYS', key)) do
      local n = tonumber(redis.call('HGET', key, f))
      if n ~= nil then
        local p = rw_timeout(key, f)
        for i = n, 1, -1 do
          remain = math.max(remain, redis.call('PTTL', p .. i))
        end
      end
    end
    if remain > 0 then
      redis.call('PEXPIRE', key, remain)
      return gone
    end
    if mode == 'write' then
      return gone
    end
  end
  redis.call('DEL', key)
  rpublish(channel, '0', how)
  return gone
end

-- rw_write_release releases one write hold of owner (every hold when
-- all), as Redisson's write unlock does: the last one removes the write
-- field, and deletes the hash and publishes '1' (every waiter wakes) when
-- no read hold of the writer is left, or turns the lock to mode read when
-- one is. Returns 1 when owner holds no write hold any more, 0 when it
-- still does, nil when it held none.
local function rw_write_release(key, channel, owner, lease, all, how)
  local mode = redis.call('HGET', key, 'mode')
  if mode == false then
    rpublish(channel, '1', how)
    return nil
  end
  if mode ~= 'write' or redis.call('HEXISTS', key, owner) == 0 then
    return nil
  end
  if not all then
    local counter = redis.call('HINCRBY', key, owner, -1)
    if counter > 0 then
      redis.call('PEXPIRE', key, lease)
      return 0
    end
  end
  redis.call('HDEL', key, owner)
  if redis.call('HLEN', key) == 1 then
    redis.call('DEL', key)
    rpublish(channel, '1', how)
  else
    redis.call('HSET', key, 'mode', 'read')
  end
  return 1
end
