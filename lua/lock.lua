-- The functions of a Mutex or FairMutex lock that its scripts' common
-- cases need, before the prelude: a script that returns early defines
-- nothing else.

-- A Mutex or FairMutex lock is a hash that outlives its holders:
--   owner  the holder's owner id; no such field while the lock is free
--   holds  the holder's hold fields ("#<n>"), separated by spaces
--   token  the holder's fencing token; while free, the last one handed out
--   t      a fencing counter a group raised above token (group_fence)
--   r      the owner and hold of the release that freed the lock
--   f      the owner a forced unlock removed
-- Held, the hash expires with the holder's lease. Free, it is kept for the
-- fence retention after the release, so that the next token is greater.

-- The state of the lock at key: its owner (false while free), holds and
-- token, and the last token handed out (0 when there is no hash). For a
-- hash that is not a lock, the error reply as fifth value.
local function lock_of(lock)
  local v = redis.call('HMGET', lock, 'owner', 'holds', 'token', 't')
  if v[3] == false and redis.call('EXISTS', lock) == 1 then
    return false, '', false, 0, redis.error_reply('WRONGTYPE lock key holds a hash that is not a lock')
  end
  return v[1], v[2] or '', v[3], math.max(tonumber(v[3] or '0'), tonumber(v[4] or '0'))
end

-- The next fencing token of a lock, from the server's TIME t: server
-- microseconds, or one more than last, the last token handed out, when the
-- clock has not moved past it.
local function next_token(t, last)
  local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if token <= last then
    token = last + 1
  end
  return string.format('%d', token)
end

-- Give a free lock to owner with one hold, token and lease ms. The field
-- mark is set to value with it, when mark is given.
local function give(lock, token, owner, hold, lease, mark, value)
  if mark then
    redis.call('HSET', lock, 'owner', owner, 'holds', hold, 'token', token, mark, value)
  else
    redis.call('HSET', lock, 'owner', owner, 'holds', hold, 'token', token)
  end
  redis.call('PEXPIRE', lock, lease)
end

-- Take a free lock for owner with one hold and lease ms: the next fencing
-- token after last (t is the server's TIME), which the call returns. The
-- fields mark and value (when mark is given) are set with it.
local function take(lock, t, last, owner, hold, lease, mark, value)
  local token = next_token(t, last)
  give(lock, token, owner, hold, lease, mark, value)
  return token
end

-- Free a held lock: no owner, no holds, the field mark set to value (when
-- mark is given: the release or forced unlock that freed it), and the hash
-- kept retention ms for its token.
local function free(lock, retention, mark, value)
  redis.call('HDEL', lock, 'owner', 'holds')
  if mark then
    redis.call('HSET', lock, mark, value)
  end
  redis.call('PEXPIRE', lock, retention)
end
