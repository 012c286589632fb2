-- The functions of a Mutex or FairMutex lock that its scripts' common
-- cases need, before the prelude: a script that returns early defines
-- nothing else.

-- A Mutex or FairMutex lock is a hash that outlives its holders:
--   owner  the holder's owner id; empty while the lock is free
--   holds  the holder's hold fields ("#<n>"), separated by spaces; empty
--          while free
--   token  the holder's fencing token; while free, the last one handed out
--   t      a fencing counter raised above token: by a group (group_fence),
--          or by an acquisition that reserved the tokens up to t for its
--          Client's local passes (acquire_free.lua)
--   r      the owner and hold of the release that freed the lock
--   f      the owner a forced unlock removed
--   q      '1' while the lock's queue may have waiters, '' or no such field
--          when it has none: whenever the queue has waiters and the hash
--          exists, q is '1'. So a release that finds no q frees the lock
--          without looking at the queue. A waiter's arrival sets it (see
--          enqueue), a hash made anew takes it from lock_of (which looks at
--          the queue of a lock without a hash), and only a script that
--          found the queue empty clears it.
-- Held, the hash expires with the holder's lease. Free, it is kept for the
-- fence retention after the release, so that the next token is greater.

-- The state of the lock at key: its owner (false while free), holds and
-- token, the last token handed out (0 when there is no hash), for a hash
-- that is not a lock the error reply, and whether its queue may have
-- waiters: q, or for a lock without a hash, whether queue (when given) has
-- members.
local function lock_of(lock, queue)
  local v = redis.call('HMGET', lock, 'owner', 'holds', 'token', 't', 'q')
  if v[3] == false then
    if redis.call('EXISTS', lock) == 1 then
      return false, '', false, 0, redis.error_reply('WRONGTYPE lock key holds a hash that is not a lock')
    end
    return false, '', false, 0, nil, queue ~= nil and redis.call('EXISTS', queue) == 1
  end
  local owner = v[1]
  if owner == '' then
    owner = false
  end
  return owner, v[2] or '', v[3], math.max(tonumber(v[3] or '0'), tonumber(v[4] or '0')), nil, v[5] == '1'
end

-- The server's TIME t in microseconds, as a decimal string.
local function micros(t)
  return string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
end

-- The next fencing token of a lock whose last token handed out is last:
-- one more, or while no token lives (last 0), the server's clock in
-- microseconds (t, its TIME, read here when nil). Counting up from the
-- clock keeps tokens below it (a lock changes hands less than once a
-- microsecond), so a lock whose hash expired gets a greater one.
local function next_token(t, last)
  if last > 0 then
    return string.format('%d', last + 1)
  end
  return micros(t or redis.call('TIME'))
end

-- How many of n tokens after token (the ownership's token, or the last
-- one its Client passed on) can be reserved for the local passes of the
-- Client that holds a lock, at t (the server's TIME): as many as asked but
-- none above the server's clock in microseconds, so that tokens stay below
-- it (see next_token). The lock's field t keeps the last one reserved, so
-- that the next token of another owner comes after them; it is
-- token_field's value.
local function reservable(t, token, n)
  return math.max(math.min(tonumber(n) or 0, tonumber(micros(t)) - tonumber(token)), 0)
end

-- The value of the field t after n tokens reserved after token.
local function token_field(token, n)
  return string.format('%d', tonumber(token) + n)
end

-- Reserve what reservable allows of n tokens after token in lock; returns
-- how many were reserved.
local function reserve_tokens(lock, t, token, n)
  n = reservable(t, token, n)
  if n > 0 then
    redis.call('HSET', lock, 't', token_field(token, n))
  end
  return n
end

-- Write the fields of lock in one HSET: f (names and values), the field
-- mark set to value when mark is given, and q set to queued when queued is
-- given ('1' or '', see above).
local function write(lock, f, mark, value, queued)
  if mark then
    f[#f + 1], f[#f + 2] = mark, value
  end
  if queued then
    f[#f + 1], f[#f + 2] = 'q', queued
  end
  redis.call('HSET', lock, unpack(f))
end

-- Give a free lock to owner with one hold, token and lease ms, writing
-- mark, value and queued as write does, and in the same HSET, when
-- reserved is more than 0, the field t of that many tokens reserved after
-- token (reservable).
local function give(lock, token, owner, hold, lease, mark, value, queued, reserved)
  local f = {'owner', owner, 'holds', hold, 'token', token}
  if reserved and reserved > 0 then
    f[7], f[8] = 't', token_field(token, reserved)
  end
  write(lock, f, mark, value, queued)
  redis.call('PEXPIRE', lock, lease)
end

-- Take a free lock for owner with one hold and lease ms: the next fencing
-- token after last (t is the server's TIME, or nil), which the call
-- returns. mark, value and queued are written as write does.
local function take(lock, t, last, owner, hold, lease, mark, value, queued)
  local token = next_token(t, last)
  give(lock, token, owner, hold, lease, mark, value, queued)
  return token
end

-- Free a held lock: no owner, no holds, mark, value and queued written as
-- write does (mark, when given, is the release or forced unlock that freed
-- it), and the hash kept retention ms for its token.
local function free(lock, retention, mark, value, queued)
  write(lock, {'owner', '', 'holds', ''}, mark, value, queued)
  redis.call('PEXPIRE', lock, retention)
end
