-- Shared by every script: publish on the lock's channel, sharded where the
-- server has sharded pub/sub (Redis 7+), classic otherwise.
local function publish(channel, message)
  local r = redis.pcall('SPUBLISH', channel, message)
  if type(r) == 'table' and r.err then
    redis.call('PUBLISH', channel, message)
  end
end

local function now_ms(t)
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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
local function client_field(id)
  return '\0c' .. (string.match(id, '^(.*):') or id)
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

-- A lock of Mutex, FairMutex and Group is two strings:
--
--   lock key:  "<owner> <token> <hold> [<hold> ...]" while held, with the
--              holder's lease as its expiry; gone when free.
--   fence key: "<last> <queued> <released> <forced>": what the lock keeps
--              between its holders, with the fence retention as expiry: the
--              last fencing token handed out, '1' when its queue may have
--              waiters ('0' when it has none), the owner and hold of the
--              release that last freed it and the owner ForceUnlock last
--              removed ('-' for none).
--
-- Every take writes the token to the fence key, so that tokens stay
-- strictly increasing when a holder's lease runs out, and afterwards as
-- long as the clock never steps back further than the retention.

local function split(v)
  local f = {}
  for w in string.gmatch(v, '%S+') do
    f[#f + 1] = w
  end
  return f
end

-- The lock and fence records of a lock: the lock's fields (nil when free)
-- and the fence's; when the fence is gone, defaults, and whether the queue
-- has waiters from the queue itself (when queue is given). A value the
-- library did not write is an error.
local function read_lock(lock, fence, queue)
  local v = redis.call('MGET', lock, fence)
  local l, f
  if v[1] then
    l = split(v[1])
    if #l < 3 or not string.match(l[2], '^%d+$') then
      error({err = 'WRONGTYPE lock key holds a value that is not a lock'})
    end
  end
  if v[2] then
    f = split(v[2])
    if #f ~= 4 or not string.match(f[1], '^%d+$') then
      error({err = 'WRONGTYPE fence key holds a value that is not a fence'})
    end
  else
    f = {'0', '0', '-', '-'}
    if queue and redis.call('EXISTS', queue) == 1 then
      f[2] = '1'
    end
  end
  if l and tonumber(l[2]) > tonumber(f[1]) then
    -- The fence outlived by its holder (a retention shorter than the lease).
    f[1] = l[2]
  end
  return l, f
end

local function write_fence(fence, f, retention)
  redis.call('SET', fence, table.concat(f, ' '), 'PX', retention)
end

-- The next fencing token after the fence's last, from the server's TIME
-- t: server microseconds, or one more than the last token when the clock
-- has not moved past it. The fence record takes it (not written).
local function next_token(f, t)
  local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(f[1])
  if token <= last then
    token = last + 1
  end
  f[1] = string.format('%d', token)
  return f[1]
end

-- Take a free lock for owner with one hold and lease ms, with the next
-- fencing token (t is the server's TIME), which the fence fields f take (the
-- caller writes them). Returns the token. A key the library did not write
-- is left alone: an error.
local function take(lock, f, t, owner, hold, lease)
  local token = next_token(f, t)
  if not redis.call('SET', lock, owner .. ' ' .. token .. ' ' .. hold, 'PX', lease, 'NX') then
    error({err = 'WRONGTYPE lock key holds a value that is not a lock'})
  end
  return token
end

-- Add a hold to a lock its owner holds (a re-entry, or a lock handed over
-- to a waiter, whose hold may be set already), never shortening its lease.
-- Returns {1, token, holds}, the acquire scripts' answer.
local function reenter(lock, l, hold, lease)
  local found = false
  for i = 3, #l do
    found = found or l[i] == hold
  end
  if not found then
    l[#l + 1] = hold
  end
  local pttl = redis.call('PTTL', lock)
  redis.call('SET', lock, table.concat(l, ' '), 'PX', math.max(pttl, tonumber(lease)))
  return {1, l[2], #l - 2}
end

-- Remove hold from the lock fields l: whether it was there.
local function drop_hold(l, hold)
  for i = 3, #l do
    if l[i] == hold then
      table.remove(l, i)
      return true
    end
  end
  return false
end

-- Queue a waiter, or keep its place: its Client's deadline is expiry ms
-- from now. A lease (ms) other than '' lets a release hand the lock to it,
-- as owner with hold. The id '' registers the waiters for '1' messages: they
-- come back by themselves after wait ms (the holder's lease), so the mark
-- stays until the next release, or a second longer than that. The fence
-- (fields f) records that the queue has waiters.
local function enqueue(queue, waiters, fence, f, retention, id, expiry, wait, lease, hold, owner)
  if f[2] ~= '1' then
    f[2] = '1'
    write_fence(fence, f, retention)
  end
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

-- Remove a waiter from the queue; the keys go when it is empty, and the
-- fence fields f then say so (not written).
local function dequeue(queue, waiters, f, id)
  redis.call('ZREM', queue, id)
  redis.call('HDEL', waiters, id)
  if redis.call('ZCARD', queue) == 0 then
    redis.call('DEL', queue, waiters)
    f[2] = '0'
  end
end

-- The first member of a queue that is '*' or a live waiter, dropping the
-- dead ones ahead of it (and the keys, when that empties the queue: the
-- fence fields f then say so, not written). t is the server's TIME, read
-- here when nil and needed. Returns the member, its Client's deadline and
-- its waiter() fields, and t; nil when nobody waits.
local function first_live(queue, waiters, f, t)
  local removed
  while true do
    local h = redis.call('ZRANGE', queue, 0, 0)[1]
    if not h then
      if removed then
        redis.call('DEL', queue, waiters)
      end
      f[2] = '0'
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

-- Free a lock (its key already deleted, or never there) whose fence fields
-- are f, and write the fence. When its queue has waiters, the lock goes to
-- the first one that is still alive, dropping the dead ones ahead of it:
-- the lock becomes the waiter's, with the lease it asked for, and
-- 'g:<id> <token>' tells it. A waiter that did not ask for that (fixed
-- leases), or that follows '*', is woken with 'w:<id>' instead and takes the
-- lock itself. '*' is consumed and announced with '1'.
local function free(lock, fence, queue, waiters, f, channel, retention)
  if f[2] ~= '1' then
    write_fence(fence, f, retention)
    return
  end
  local h, d, lease, hold, owner, t = first_live(queue, waiters, f, nil)
  local shared = h == '*'
  if shared then
    dequeue(queue, waiters, f, h)
    publish(channel, '1')
    h, d, lease, hold, owner, t = first_live(queue, waiters, f, t)
  end
  if h and lease and not shared then
    local token = take(lock, f, t, owner, hold, lease)
    dequeue(queue, waiters, f, h)
    write_fence(fence, f, retention)
    publish(channel, 'g:' .. h .. ' ' .. token)
    return
  end
  write_fence(fence, f, retention)
  if h then
    publish(channel, 'w:' .. h)
  end
end
