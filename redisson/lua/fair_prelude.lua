-- Shared by the scripts of Redisson's fair lock: its queue, the list
-- redisson_lock_queue:{NAME} of waiter ids in arrival order, and its
-- timeouts, the zset redisson_lock_timeout:{NAME} of waiter id -> the
-- time (ms, the clients' wall clock) after which the waiter counts as
-- gone.

-- rfair_layout returns an error reply when the queue or the timeouts hold
-- another type than Redisson writes there.
local function rfair_layout(queue, timeouts)
  local q = redis.call('TYPE', queue).ok
  if q ~= 'none' and q ~= 'list' then
    return redis.error_reply('WRONGTYPE ' .. queue .. ' holds a ' .. q .. ', not the queue of a Redisson fair lock')
  end
  local z = redis.call('TYPE', timeouts).ok
  if z ~= 'none' and z ~= 'zset' then
    return redis.error_reply('WRONGTYPE ' .. timeouts .. ' holds a ' .. z .. ', not the timeouts of a Redisson fair lock')
  end
end

-- rfair_purge takes off the queue's head as long as its timeout is past.
local function rfair_purge(queue, timeouts, now)
  while true do
    local head = redis.call('LINDEX', queue, 0)
    if head == false then
      return
    end
    local timeout = redis.call('ZSCORE', timeouts, head)
    if timeout == false or tonumber(timeout) > tonumber(now) then
      return
    end
    redis.call('ZREM', timeouts, head)
    redis.call('LPOP', queue)
  end
end

-- rfair_notify tells the queue's head, on its own channel, that the lock
-- may be free.
local function rfair_notify(queue, channel, how)
  local head = redis.call('LINDEX', queue, 0)
  if head ~= false then
    rpublish(channel .. ':' .. head, '0', how)
  end
end

-- rfair_leave takes a waiter off the queue; with a wait (ms) the timeouts
-- of the waiters behind it come forward by that much, as the timeout of
-- each counted the wait of those ahead.
local function rfair_leave(queue, timeouts, waiter, wait)
  if wait then
    local q = redis.call('LRANGE', queue, 0, -1)
    local behind = false
    for _, w in ipairs(q) do
      if behind then
        redis.call('ZINCRBY', timeouts, -tonumber(wait), w)
      elseif w == waiter then
        behind = true
      end
    end
  end
  redis.call('ZREM', timeouts, waiter)
  redis.call('LREM', queue, 0, waiter)
end
