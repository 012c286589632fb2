-- The functions of a Mutex or FairMutex lock that use its queue (after
-- lock.lua and the prelude).

-- A lock's waiters: a queue (zset: waiter id -> arrival number) and a
-- waiters hash: waiter id -> "lease hold owner" for a waiter the lock may be
-- handed to as owner with hold, '' for one to wake; "\0n" -> the last arrival
-- number; "\0c<client id>" -> the deadline (server ms) of the waiters of one
-- Client; "\0a<client id>" -> '' while no place of that Client was
-- dropped as dead: written with the Client's first place, and by its
-- presence passes. A release that drops a place of a Client deletes it
-- with the Client's deadline, so the Client's next pass, which writes it
-- again, learns that places of it may be gone (presence.lua). The deadline
-- alone cannot tell: a later arrival of the Client writes it anew. A waiter is alive while its Client's deadline has not passed:
-- each Client renews one deadline per lock for all its waiters, whatever
-- their number. The member '*' of the queue stands for the waiters that
-- wait for a '1' message, because they wait for several locks at once.
local function client_field(id)
  return '\0c' .. client_of(id)
end

-- The field that tells a Client its places are whole (see above).
local function alive_field(id)
  return '\0a' .. client_of(id)
end

-- The fields of a waiter's entry: lease, hold, owner (nil for a waiter to
-- wake), and the number of fencing tokens to reserve after its own for its
-- Client's local passes (0 when the entry names none).
local function waiter(v)
  if not v then
    return nil
  end
  local lease, hold, owner, reserve = string.match(v, '^(%d+) (%S+) (%S+) ?(%d*)$')
  return lease, hold, owner, tonumber(reserve) or 0
end

-- How long a queue outlives its Clients' renewals, in waiter expiries: the
-- Clients refresh it now and then rather than at every renewal.
local queue_keep = 10

-- Queue a waiter, or keep its place: its Client's deadline is expiry ms
-- from now. A lease (ms) other than '' lets a release hand the lock to it,
-- as owner with hold, reserving reserve tokens (when given and not '')
-- after its own for its Client's local passes. The id '' registers the waiters for '1' messages: they
-- come back by themselves after wait ms (the holder's lease), so the mark
-- stays until the next release, or a second longer than that. new tells
-- that the waiter has no place yet. lock, when given, is the lock hash,
-- whose q (lock.lua) is set: give it when the hash exists and its q is not
-- set, which says that nobody waits, so that the queue starts anew. first
-- tells that the Client has no other waiter on the lock: its places are
-- whole (alive_field). Returns the server's clock in ms (nil for the id '').
local function enqueue(lock, queue, waiters, id, expiry, wait, lease, hold, owner, new, first, reserve)
  if lock then
    redis.call('HSET', lock, 'q', '1')
  end
  if id == '' then
    redis.call('ZADD', queue, 0, '*')
    local keep = math.max(wait, 0) + 1000
    if redis.call('PTTL', queue) < keep then
      redis.call('PEXPIRE', queue, keep)
    end
    return
  end
  local t = redis.call('TIME')
  local entry = ''
  if lease ~= '' then
    entry = lease .. ' ' .. hold .. ' ' .. owner
    if reserve and reserve ~= '' then
      entry = entry .. ' ' .. reserve
    end
  end
  local f = {id, entry, client_field(id), now_ms(t) + expiry}
  if first then
    f[#f + 1], f[#f + 2] = alive_field(id), ''
  end
  local n
  if lock then
    -- Nobody waits: the queue starts anew with this waiter, numbered by
    -- the clock in microseconds, so that it would still come after the
    -- arrivals of a queue that q had missed.
    n = micros(t)
    f[#f + 1], f[#f + 2] = '\0n', n
  elseif new or redis.call('ZSCORE', queue, id) == false then
    n = redis.call('HINCRBY', waiters, '\0n', 1)
  end
  if n then
    redis.call('ZADD', queue, n, id)
  end
  redis.call('HSET', waiters, unpack(f))
  -- A new queue gets its expiry; a longer one has it refreshed once half
  -- of it is gone (the Clients' presence passes refresh it too). The
  -- waiters hash's is the one read: the queue's may have been set by '*'
  -- alone, before the hash existed.
  local keep = queue_keep * expiry
  if lock or redis.call('PTTL', waiters) < keep / 2 then
    redis.call('PEXPIRE', queue, keep)
    redis.call('PEXPIRE', waiters, keep)
  end
  return now_ms(t)
end

-- Remove a waiter from the queue; the keys go when it is empty. Returns
-- whether others wait.
local function dequeue(queue, waiters, id)
  redis.call('ZREM', queue, id)
  if redis.call('ZCARD', queue) == 0 then
    redis.call('DEL', queue, waiters)
    return false
  end
  redis.call('HDEL', waiters, id)
  return true
end

-- The first member of a queue that is '*' or a live waiter, dropping the
-- dead ones ahead of it; the waiters hash goes when the queue is found
-- empty. With pop, the member is taken off the queue as well: the caller
-- then hands it the lock and drops its entry (dropped), or puts it back
-- (kept). t is the server's TIME, read here when nil and needed. Returns
-- the member (nil when nobody waits), its arrival number (with pop), its
-- Client's deadline, its waiter() fields but the reserve, t, with pop
-- whether others may still wait: somebody arrived after it (and may have
-- left since), and last the reserve of its entry.
local function first_live(queue, waiters, t, pop)
  while true do
    local h, n
    if pop then
      local p = redis.call('ZPOPMIN', queue)
      h, n = p[1], p[2]
    else
      h = redis.call('ZRANGE', queue, 0, 0)[1]
    end
    if not h then
      redis.call('DEL', waiters)
      return nil, n, 0, nil, nil, nil, t, false
    end
    if h == '*' then
      return h, n, 0, nil, nil, nil, t, true
    end
    t = t or redis.call('TIME')
    local cf = client_field(h)
    local v = redis.call('HMGET', waiters, cf, h, '\0n')
    local d = tonumber(v[1] or '0') or 0
    if d > now_ms(t) then
      local lease, hold, owner, reserve = waiter(v[2])
      return h, n, d, lease, hold, owner, t, pop and tonumber(n) < (tonumber(v[3] or '0') or 0), reserve
    end
    -- Its Client stopped renewing: every place of that Client is dead.
    -- The Client, if alive, learns it at its next presence pass.
    if not pop then
      redis.call('ZREM', queue, h)
    end
    redis.call('HDEL', waiters, h, cf, alive_field(h))
  end
end

-- Drop the entry of a waiter that first_live took off the queue, or the
-- waiters hash when nobody else waits.
local function dropped(waiters, h, others)
  if others then
    redis.call('HDEL', waiters, h)
  else
    redis.call('DEL', waiters)
  end
end

-- Put back a waiter that first_live took off the queue with arrival number
-- n, for its Client's deadline d (server ms, now at t). A queue that went
-- with it (for sure when nobody else may wait, others false) gets an
-- expiry again: it is the only waiter there.
local function kept(queue, h, n, d, t, others)
  redis.call('ZADD', queue, n, h)
  if not others or redis.call('PTTL', queue) == -1 then
    redis.call('PEXPIRE', queue, queue_keep * math.max(d - now_ms(t), 1))
  end
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

-- A re-entry claims its parent's ownership as Redis has it: the lock held
-- by the parent's owner id with the parent's token (parent_token, '' or nil
-- for an acquisition that is no re-entry). A lock that is free, or held by
-- another owner, or taken afresh under the parent's owner id, is not the
-- parent's any more, and the re-entry must not make it so: it is refused,
-- with {-1, why}: why 1 when a forced unlock removed the parent's owner
-- (f; as the watchdog tells it), else 2 when another ownership holds it, 0
-- when it is free (expired, deleted). nil when the re-entry may add its hold.
local function reentry_refused(lock, owner, token, parent_owner, parent_token)
  if parent_token == nil or parent_token == '' then
    return nil
  end
  if owner == parent_owner and token == parent_token then
    return nil
  end
  if redis.call('HGET', lock, 'f') == parent_owner then
    return {-1, 1}
  end
  if owner ~= false then
    return {-1, 2}
  end
  return {-1, 0}
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

-- Free a lock whose last token is last, and pass it to the first waiter of
-- its queue that is still alive, dropping the dead ones ahead of it: the
-- lock becomes the waiter's, with the lease it asked for, and
-- 'g:<id> <token> <ms>' tells it, with the server's clock at the release.
-- A waiter whose entry asks for tokens for its Client's local passes gets
-- them reserved after its token (reservable), written with the ownership
-- as a free lock's taker has them, and their number told after the clock:
-- 'g:<id> <token> <ms> <n>'. A waiter that did not ask for that (fixed
-- leases), or that follows '*', is woken with 'w:<id>' instead and takes the
-- lock itself. Both go to the waiter's Client alone (tell). '*' is consumed
-- and announced with '1' on the lock's channel. The field mark is set to
-- value (when mark is given: the release or forced unlock that freed it),
-- and q to whether others may still wait; a lock left free is kept retention
-- ms. A lock without a hash (last 0) left free stays without one.
local function vacate(lock, last, queue, waiters, channel, retention, mark, value)
  local h, n, d, lease, hold, owner, t, others, reserve = first_live(queue, waiters, nil, true)
  if h == '*' then
    publish(channel, '1')
    h, n, d, lease, hold, owner, t = first_live(queue, waiters, t)
    lease = nil
  elseif h and not lease then
    kept(queue, h, n, d, t, others)
  end
  if lease then
    dropped(waiters, h, others)
    local token = next_token(t, last)
    local reserved = reservable(t, token, reserve)
    give(lock, token, owner, hold, lease, mark, value, others and '1' or '', reserved)
    local told = 'g:' .. h .. ' ' .. token .. ' ' .. now_ms(t)
    if reserved > 0 then
      told = told .. ' ' .. reserved
    end
    tell(channel, h, told)
    return
  end
  if last > 0 then
    free(lock, retention, mark, value, h and '1' or '')
  end
  if h then
    tell(channel, h, 'w:' .. h)
  end
end

-- Whether the release of owner's hold (hold '' for every hold) is the one
-- that freed lock ('r'): a release retried after its reply was lost.
local function freed_by(lock, owner, hold)
  return redis.call('HGET', lock, 'r') == owner .. hold
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
