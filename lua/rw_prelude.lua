-- Shared by the RWMutex scripts. Their keys always come in this order, all
-- in one slot:
-- KEYS[1] writer hash: owner, token and one field per hold ("#<n>"); its
--         expiry is the writer's lease
-- KEYS[2] readers: zset, member = reader id, score = when that read share
--         expires (server milliseconds)
-- KEYS[3] waiting writers: zset, member = writer owner id, score = when the
--         registration lapses unless the writer looks again
-- KEYS[4] waiting readers: zset, as KEYS[3], for readers blocked by a writer
-- KEYS[5] passes: zset of waiting readers a writer's release let in ahead of
--         the writers waiting then, scores as in KEYS[4]
-- KEYS[6] fence hash: t = last write token, r = last write hold released
-- Every zset entry is due at its score: scripts drop due entries before
-- they look, by the server's clock, so a crashed reader's share ends on
-- time whoever else renews theirs. Each key expires no earlier than its
-- latest entry, so nothing outlives the lock's last user.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- writer returns the owner of the write lock, or false when it is free.
local function writer()
  local o = redis.call('HGET', KEYS[1], 'owner')
  if o == false and redis.call('EXISTS', KEYS[1]) == 1 then
    error(redis.error_reply('WRONGTYPE writer key holds a hash that is not a lock'))
  end
  return o
end

-- purge drops the due entries of a zset.
local function purge(key, now)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
end

-- live drops the due entries of a zset and returns how many are left.
local function live(key, now)
  purge(key, now)
  return redis.call('ZCARD', key)
end

-- due reports whether a zset score (a string, or false for no entry) is
-- missing or due.
local function due(score, now)
  return score == false or tonumber(score) <= now
end

-- earliest returns the member and score of a zset's first entry, or nil.
local function earliest(key)
  local e = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #e == 0 then
    return nil
  end
  return e[1], tonumber(e[2])
end

-- extend makes key live at least ms milliseconds more.
local function extend(key, ms)
  if redis.call('PTTL', key) < tonumber(ms) then
    redis.call('PEXPIRE', key, ms)
  end
end

-- wake_writer wakes one waiting writer when nothing keeps writers out any
-- more: no writer, no reader, no pass.
local function wake_writer(channel, now)
  if redis.call('ZCARD', KEYS[3]) == 0 or redis.call('EXISTS', KEYS[1]) == 1
    or live(KEYS[2], now) > 0 or live(KEYS[5], now) > 0 or live(KEYS[3], now) == 0 then
    return
  end
  local w = earliest(KEYS[3])
  tell(channel, w, 'w:' .. w)
end

-- Drop a hold of the writer (hold '' drops them all). Returns true when
-- the owner still holds the lock through other holds. Otherwise the lock is
-- deleted and its fence hash remembers mark (owner and hold) as the release
-- that freed it, for retention ms, so that a retried release knows.
local function drop_hold(lock, fence, hold, mark, retention)
  if hold ~= '' then
    redis.call('HDEL', lock, hold)
    if redis.call('HLEN', lock) > 2 then
      return true
    end
  end
  redis.call('DEL', lock)
  redis.call('HSET', fence, 'r', mark)
  redis.call('PEXPIRE', fence, retention)
  return false
end
