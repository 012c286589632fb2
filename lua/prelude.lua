-- Shared by every script: publish on the lock's channel, sharded where the
-- server has sharded pub/sub (Redis 7+), classic otherwise.
local function publish(channel, message)
  local r = redis.pcall('SPUBLISH', channel, message)
  if type(r) == 'table' and r.err then
    redis.call('PUBLISH', channel, message)
  end
end

-- Wake the first waiter of a lock's queue (zset: waiter id -> arrival
-- number; hash: waiter id -> deadline in server ms) that is still alive,
-- dropping the dead ones ahead of it. The member '*' stands for the waiters
-- that wait for a '1' message (they wait for several locks at once): it is
-- consumed and announced first. The keys go when the queue is empty.
local function wake_head(queue, waiters, channel)
  local now, removed
  while true do
    local h = redis.call('ZRANGE', queue, 0, 0)[1]
    if not h then
      if removed then
        redis.call('DEL', queue, waiters)
      end
      return
    end
    removed = true
    if h == '*' then
      redis.call('ZREM', queue, h)
      publish(channel, '1')
    else
      if not now then
        local t = redis.call('TIME')
        now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      end
      if tonumber(redis.call('HGET', waiters, h) or '0') > now then
        publish(channel, 'w:' .. h)
        return
      end
      redis.call('ZREM', queue, h)
      redis.call('HDEL', waiters, h)
    end
  end
end

-- Queue a waiter, or renew its place: it stays alive for expiry ms after
-- its last visit. The id '' registers the waiters for '1' messages: they
-- come back by themselves after wait ms (the holder's lease), so the mark
-- stays until the next release, or a second longer than that.
local function enqueue(queue, waiters, id, expiry, wait)
  if id == '' then
    redis.call('ZADD', queue, 0, '*')
    local keep = math.max(wait, 0) + 1000
    if redis.call('PTTL', queue) < keep then
      redis.call('PEXPIRE', queue, keep)
    end
    return
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if redis.call('ZSCORE', queue, id) == false then
    redis.call('ZADD', queue, redis.call('HINCRBY', waiters, '\0n', 1), id)
  end
  redis.call('HSET', waiters, id, now + expiry)
  -- The queue lives as long as a waiter keeps coming back.
  if redis.call('PTTL', queue) < expiry then
    redis.call('PEXPIRE', queue, expiry)
  end
  redis.call('PEXPIRE', waiters, expiry)
end

-- Remove a waiter from the queue; the keys go when it is empty.
local function dequeue(queue, waiters, id)
  redis.call('ZREM', queue, id)
  redis.call('HDEL', waiters, id)
  if redis.call('ZCARD', queue) == 0 then
    redis.call('DEL', queue, waiters)
  end
end
