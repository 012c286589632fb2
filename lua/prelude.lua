-- Shared by every script: publish on the lock's channel, sharded where the
-- server has sharded pub/sub (Redis 7+), classic otherwise.
local function publish(channel, message)
  local r = redis.pcall('SPUBLISH', channel, message)
  if type(r) == 'table' and r.err then
    redis.call('PUBLISH', channel, message)
  end
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

local function now_ms(t)
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The field f of the hash at key, false when there is no key. For a key
-- that holds something else than a what (no such field), false and the
-- error reply for the script to return.
local function field_of(key, f, what)
  local v = redis.call('HGET', key, f)
  if v == false and redis.call('EXISTS', key) == 1 then
    return false, redis.error_reply('WRONGTYPE ' .. what .. ' key holds a hash that is not a ' .. what)
  end
  return v
end

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

-- The remaining lease of the holder of a lock in ms (PTTL), -2 while the
-- lock is free.
local function lease_left(lock)
  if redis.pcall('HEXISTS', lock, 'owner') == 0 then
    return -2
  end
  return redis.call('PTTL', lock)
end

-- The number of holds in a holds field.
local function count_holds(holds)
  local _, n = string.gsub(holds, '%S+', '')
  return n
end

-- holds without hold, and whether hold was one of them.
local function without_hold(holds, hold)
  local s, e = string.find(' ' .. holds .. ' ', ' ' .. hold .. ' ', 1, true)
  if not s then
    return holds, false
  end
  local rest = string.sub(' ' .. holds .. ' ', 1, s) .. string.sub(' ' .. holds .. ' ', e + 1)
  return string.match(rest, '^%s*(.-)%s*$'), true
end

-- A lock's waiters: a queue (zset: waiter id -> arrival number) and a
-- waiters hash: waiter id -> "lease hold owner" for a waiter the lock may be
-- handed to as owner with hold, '' for one to wake; "\0n" -> the last arrival
-- number; "\0c<client id>" -> the deadline (server ms) of the waiters of one
-- Client. A waiter id is its Client's id, ':' and a number, and a waiter is
-- alive while its Client's deadline has not passed: each Client renews one
-- deadline per lock for all its waiters, whatever their number. The member
-- '*' of the queue stands for the waiters that wait for a '1' message,
-- because they wait for several locks at once.
local function client_of(id)
  return string.match(id, '^(.*):') or id
end

local function client_field(id)
  return '\0c' .. client_of(id)
end

-- tell publishes a message for the waiter id alone: on its Client's own
-- channel of the lock, the lock's channel, ':' and the Client's id. Only
-- that Client hears it, however many others wait.
local function tell(channel, id, message)
  publish(channel .. ':' .. client_of(id), message)
end

-- The fields of a waiter's entry: lease, hold, owner (nil for a waiter to
-- wake).
local function waiter(v)
  if not v then
    return nil
  end
  return string.match(v, '^(%d+) (%S+) (%S+)$')
end

-- How long a queue outlives its Clients' renewals, in waiter expiries: the
-- Clients refresh it now and then rather than at every renewal.
local queue_keep = 10

-- Queue a waiter, or keep its place: its Client's deadline is expiry ms
-- from now. A lease (ms) other than '' lets a release hand the lock to it,
-- as owner with hold. The id '' registers the waiters for '1' messages: they
-- come back by themselves after wait ms (the holder's lease), so the mark
-- stays until the next release, or a second longer than that.
local function enqueue(queue, waiters, id, expiry, wait, lease, hold, owner)
  if id == '' then
    redis.call('ZADD', queue, 0, '*')
    local keep = math.max(wait, 0) + 1000
    if redis.call('PTTL', queue) < keep then
      redis.call('PEXPIRE', queue, keep)
    end
    return
  end
  local now = now_ms(redis.call('TIME'))
  if redis.call('ZSCORE', queue, id) == false then
    redis.call('ZADD', queue, redis.call('HINCRBY', waiters, '\0n', 1), id)
  end
  local entry = ''
  if lease ~= '' then
    entry = lease .. ' ' .. hold .. ' ' .. owner
  end
  redis.call('HSET', waiters, id, entry, client_field(id), now + expiry)
  local keep = queue_keep * expiry
  if redis.call('PTTL', queue) < keep then
    redis.call('PEXPIRE', queue, keep)
    redis.call('PEXPIRE', waiters, keep)
  end
end

-- Remove a waiter from the queue; the keys go when it is empty.
local function dequeue(queue, waiters, id)
  redis.call('ZREM', queue, id)
  redis.call('HDEL', waiters, id)
  if redis.call('ZCARD', queue) == 0 then
    redis.call('DEL', queue, waiters)
  end
end

-- Take a free lock for owner with one hold and lease ms: the next fencing
-- token after last (t is the server's TIME), which the call returns. The
-- fields mark and value (when mark is given) are set with it.
local function take(lock, t, last, owner, hold, lease, mark, value)
  local token = next_token(t, last)
  if mark then
    redis.call('HSET', lock, 'owner', owner, 'holds', hold, 'token', token, mark, value)
  else
    redis.call('HSET', lock, 'owner', owner, 'holds', hold, 'token', token)
  end
  redis.call('PEXPIRE', lock, lease)
  return token
end

-- Add a hold to a lock its owner holds with holds and token (a re-entry,
-- or a lock handed over to a waiter, whose hold is there already), never
-- shortening its lease. Returns {1, token, holds}, the acquire scripts'
-- answer.
local function reenter(lock, holds, token, hold, lease)
  if not select(2, without_hold(holds, hold)) then
    holds = holds .. ' ' .. hold
    redis.call('HSET', lock, 'holds', holds)
  end
  if redis.call('PTTL', lock) < tonumber(lease) then
    redis.call('PEXPIRE', lock, lease)
  end
  return {1, token, count_holds(holds)}
end

-- The first member of a queue that is '*' or a live waiter, dropping the
-- dead ones ahead of it (and the keys, when that empties the queue). t is the
-- server's TIME, read here when nil and needed. Returns the member, its
-- Client's deadline and its waiter() fields, and t; nil when nobody waits.
local function first_live(queue, waiters, t)
  local removed
  while true do
    local h = redis.call('ZRANGE', queue, 0, 0)[1]
    if not h then
      if removed then
        redis.call('DEL', queue, waiters)
      end
      return nil, 0, nil, nil, nil, t
    end
    if h == '*' then
      return h, 0, nil, nil, nil, t
    end
    t = t or redis.call('TIME')
    local cf = client_field(h)
    local v = redis.call('HMGET', waiters, cf, h)
    local d = tonumber(v[1] or '0') or 0
    if d > now_ms(t) then
      local lease, hold, owner = waiter(v[2])
      return h, d, lease, hold, owner, t
    end
    -- Its Client stopped renewing: every place of that Client is dead.
    redis.call('ZREM', queue, h)
    redis.call('HDEL', waiters, h, cf)
    removed = true
  end
end

-- Free a lock whose last token is last, and pass it to the first waiter of
-- its queue that is still alive, dropping the dead ones ahead of it: the
-- lock becomes the waiter's, with the lease it asked for, and
-- 'g:<id> <token>' tells it. A waiter that did not ask for that (fixed
-- leases), or that follows '*', is woken with 'w:<id>' instead and takes the
-- lock itself. Both go to the waiter's Client alone (tell). '*' is consumed
-- and announced with '1' on the lock's channel. The field mark is set to
-- value (when mark is given: the release or forced unlock that freed it);
-- a lock left free is kept retention ms.
local function vacate(lock, last, queue, waiters, channel, retention, mark, value)
  local h, d, lease, hold, owner, t = first_live(queue, waiters, nil)
  local shared = h == '*'
  if shared then
    dequeue(queue, waiters, h)
    publish(channel, '1')
    h, d, lease, hold, owner, t = first_live(queue, waiters, t)
  end
  if h and lease and not shared then
    local token = take(lock, t, last, owner, hold, lease, mark, value)
    dequeue(queue, waiters, h)
    tell(channel, h, 'g:' .. h .. ' ' .. token)
    return
  end
  redis.call('HDEL', lock, 'owner', 'holds')
  if mark then
    redis.call('HSET', lock, mark, value)
  end
  redis.call('PEXPIRE', lock, retention)
  if h then
    tell(channel, h, 'w:' .. h)
  end
end

-- Drop a hold of owner, who holds lock with holds (hold '' drops them all),
-- and vacate the lock when it was the last one, remembering the owner and
-- hold as the release that freed it ('r'), so that a retried release knows.
-- Returns 2 when the owner still holds the lock through other holds, 1
-- when the lock is free (or passed on).
local function release_hold(lock, holds, last, hold, owner, queue, waiters, channel, retention)
  if hold ~= '' then
    local rest, found = without_hold(holds, hold)
    if rest ~= '' then
      if found then
        redis.call('HSET', lock, 'holds', rest)
      end
      return 2
    end
  end
  vacate(lock, last, queue, waiters, channel, retention, 'r', owner .. hold)
  return 1
end
