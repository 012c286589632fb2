-- Acquire, re-enter or queue for a fair (FIFO) lock.
-- KEYS[1] lock hash, KEYS[2] queue zset, KEYS[3] waiters hash (see the prelude)
-- ARGV[1] owner id, ARGV[2] hold field, ARGV[3] lease ms,
-- ARGV[4] waiter id, ARGV[5] waiter expiry ms, ARGV[6] 'try' for a single
-- attempt (never queued), anything else otherwise ('first', 'queued', as for
-- acquire.lua: a taken lock dequeues the waiter whatever it says),
-- ARGV[7] the lease (ms) to hand the lock over with, '' to be woken instead,
-- ARGV[8] '1' when the waiter's Client has no other waiter on the lock,
-- ARGV[9] unused (acquire.lua's reservation), ARGV[10] (optional) for a
-- re-entry, the token of the parent's ownership ('' otherwise): see
-- reentry_refused.
-- Returns {1, token, holds} when held by ARGV[1] after the call, {0, wait
-- ms, held, last, now[, holder]} otherwise: how long until something may
-- change, held 1 when another owner holds the lock (wait is its remaining
-- lease, holder its owner id), 0 when it is free but the queue's head is
-- another live waiter (wait is until its Client's deadline), the last
-- token handed out, and the server's clock in ms (now and holder not in
-- 'try' mode); {-1, why} when a re-entry is refused (reentry_refused).

-- owner, holds, token, last, bad and queued: lock_of, read in
-- fair_free.lua.
if bad then return bad end
local refused = reentry_refused(KEYS[1], owner, token, ARGV[1], ARGV[10])
if refused then
  return refused
end
if owner == ARGV[1] then
  dequeue(KEYS[2], KEYS[3], ARGV[4])
  return reenter(KEYS[1], holds, token, ARGV[2], ARGV[3])
end
if owner ~= false then
  -- Held by another owner: wait for its release.
  local wait = redis.call('PTTL', KEYS[1])
  if ARGV[6] == 'try' then
    return {0, wait, 1, last}
  end
  local now = enqueue(not queued and KEYS[1], KEYS[2], KEYS[3], ARGV[4], tonumber(ARGV[5]), wait, ARGV[7], ARGV[2], ARGV[1], ARGV[6] == 'first', ARGV[8] == '1')
  return {0, wait, 1, last, now, owner}
end
local h, _, hd, _, _, _, t = first_live(KEYS[2], KEYS[3], nil)
if h == nil or h == ARGV[4] then
  -- The waiter is the head, or nobody waits (nothing to leave then).
  local others = h and dequeue(KEYS[2], KEYS[3], ARGV[4])
  return {1, take(KEYS[1], t, last, ARGV[1], ARGV[2], ARGV[3], nil, nil, others and '1' or ''), 1}
end
-- Free, and the head is another live waiter: wait for its Client's deadline.
local wait = hd - now_ms(t or redis.call('TIME'))
local now
if ARGV[6] ~= 'try' then
  now = enqueue(token and not queued and KEYS[1], KEYS[2], KEYS[3], ARGV[4], tonumber(ARGV[5]), wait, ARGV[7], ARGV[2], ARGV[1], ARGV[6] == 'first', ARGV[8] == '1')
end
return {0, wait, 0, last, now}
