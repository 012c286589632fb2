-- The functions of a Mutex or FairMutex lock that use its queue (after
-- lock.lua and the prelude).

-- The remaining lease of the holder of a lock in ms (PTTL), -2 while the
-- lock is free or its key is not a lock.
local function lease_left(lock)
  local ok, owner = pcall(lock_of, lock)
  if not ok or not owner then
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
-- 'g:<id> <token>' tells it. A waiter that did not ask for that (fixed
-- leases), or that follows '*', is woken with 'w:<id>' instead and takes the
-- lock itself. Both go to the waiter's Client alone (tell). '*' is consumed
-- and announced with '1' on the lock's channel. The field mark is set to
-- value (when mark is given: the release or forced unlock that freed it),
-- and q to whether others may still wait; a lock left free is kept retention
-- ms. A lock without a hash (last 0) left free stays without one.
local function vacate(lock, last, queue, waiters, channel, retention, mark, value)
  local h, n, d, lease, hold, owner, t, others = pop_live(queue, waiters, nil)
  if h == '*' then
    publish(channel, '1')
    h, d, lease, hold, owner, t = first_live(queue, waiters, t)
    lease = nil
  elseif h and not lease then
    kept(queue, h, n, d, t)
  end
  if lease then
    dropped(waiters, h, others)
    local token = take(lock, t, last, owner, hold, lease, mark, value, others and '1' or '')
    tell(channel, h, 'g:' .. h .. ' ' .. token)
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
