-- Shared by the semaphore scripts that take the four keys of a semaphore:
-- KEYS[1] semaphore hash: size, used (permits held by live holders), seq
--         (the last ticket handed to a waiter). It has no expiry.
-- KEYS[2] holders zset: member "<owner>:<permits>", score = expiry (server ms)
-- KEYS[3] queue zset: member "<owner>:<permits>", score = ticket (arrival)
-- KEYS[4] queue deadlines zset: member as in KEYS[3], score = expiry (server
--         ms); a waiter that stops coming back leaves the queue then.
-- KEYS[2..4] expire on their own once every member has.
local S, H, Q, QT = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- permits is the number of permits a member holds or waits for.
local function permits(member)
  return tonumber(string.match(member, ':(%d+)$')) or 0
end

-- wake_member tells a queued member ("<owner>:<permits>", the waiter id
-- its acquisition listens for) that it may take its permits now.
local function wake_member(channel, member)
  tell(channel, string.match(member, '^(.*):') or member, 'w:' .. member)
end

local function zrem_all(key, members)
  for i = 1, #members, 1000 do
    redis.call('ZREM', key, unpack(members, i, math.min(i + 999, #members)))
  end
end

-- recount sums the permits of the live holders.
local function recount(now)
  local used = 0
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', H, string.format('(%d', now), '+inf')) do
    used = used + permits(m)
  end
  return used
end

local not_ours = 'WRONGTYPE semaphore key holds a hash that is not a semaphore'

-- state returns the size (nil when the semaphore has none) and the permits
-- held as last counted; for a key that holds something else, also the
-- error reply for the script to return.
local function state()
  local v = redis.call('HMGET', S, 'size', 'used')
  if v[1] == false then
    if redis.call('EXISTS', S) == 1 then
      return nil, 0, redis.error_reply(not_ours)
    end
    return nil, 0
  end
  return tonumber(v[1]), tonumber(v[2] or '0')
end

-- purge drops the holders and the waiters whose time is up. It returns the
-- permits held by live holders, and whether anything was dropped. Call it
-- only while KEYS[1] holds a size.
local function purge(now, used)
  local dropped = false
  local dead = redis.call('ZRANGEBYSCORE', H, '-inf', now)
  if #dead > 0 then
    for _, m in ipairs(dead) do
      used = used - permits(m)
    end
    redis.call('ZREMRANGEBYSCORE', H, '-inf', now)
    dropped = true
  elseif used ~= 0 and redis.call('EXISTS', H) == 0 then
    -- The holders key expired with its last holder.
    used, dropped = 0, true
  end
  if used < 0 then
    used, dropped = recount(now), true
  end
  if dropped then
    redis.call('HSET', S, 'used', used)
  end
  local gone = redis.call('ZRANGEBYSCORE', QT, '-inf', now)
  if #gone > 0 then
    zrem_all(Q, gone)
    redis.call('ZREMRANGEBYSCORE', QT, '-inf', now)
    dropped = true
  end
  return used, dropped
end

-- leave removes a member from the queue; 1 when it was queued.
local function leave(member)
  if redis.call('ZREM', Q, member) == 1 then
    redis.call('ZREM', QT, member)
    return 1
  end
  return 0
end

-- wake names, each on its Client's channel (wake_member), every queued
-- waiter that can take its permits now (FIFO: all of them fit together with
-- the waiters queued before), and every waiter asking for more than the
-- size, which must learn it. A waiter asking for more than the size
-- reserves nothing.
local function wake(channel, size, avail, except)
  local cum, i = 0, 0
  while true do
    local batch = redis.call('ZRANGE', Q, i, i + 99)
    if #batch == 0 then
      return
    end
    for _, m in ipairs(batch) do
      local k = permits(m)
      if k <= size then
        cum = cum + k
        if cum > avail then
          return
        end
      end
      if m ~= except then
        wake_member(channel, m)
      end
    end
    i = i + 100
  end
end

-- fits reports whether n permits for member can be granted now: they fit
-- in the available permits together with those of every waiter queued
-- before member (every waiter, when member is not queued). The second
-- result tells whether member was found in the queue (it is not looked for
-- when the permits do not fit).
local function fits(member, n, size, avail)
  local cum, i = n, 0
  if cum > avail then
    return false, false
  end
  while true do
    local batch = redis.call('ZRANGE', Q, i, i + 99)
    if #batch == 0 then
      return true, false
    end
    for _, m in ipairs(batch) do
      if m == member then
        return true, true
      end
      local k = permits(m)
      if k <= size then
        cum = cum + k
        if cum > avail then
          return false, false
        end
      end
    end
    i = i + 100
  end
end

-- extend makes key live at least ms more.
local function extend(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

