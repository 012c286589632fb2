-- Shared by the scripts of Redisson's RPermitExpirableSemaphore: the
-- string NAME counts the permits available (as an RSemaphore's), and the
-- zset {NAME}:timeout holds the permits acquired: member a permit id's 16
-- bytes, score when the permit expires (ms since the epoch) or
-- psem_forever for a permit without lease. A permit whose score is not
-- after now has expired: any script reclaims it (ZREM, INCRBY NAME).
-- Permit ids travel as 32 hex digits, as Java shows them.

local psem_forever = 922337203685477

-- psem_layout returns the permits available (false when NAME does not
-- exist), or an error reply when NAME or the zset holds something else.
local function psem_layout(name, zset)
  local v, bad = rcount_layout(name, 'permit expirable semaphore')
  if bad then
    return nil, bad
  end
  local t = redis.call('TYPE', zset).ok
  if t ~= 'none' and t ~= 'zset' then
    return nil, redis.error_reply('WRONGTYPE ' .. zset .. ' holds a ' .. t .. ', not the permits of a Redisson permit expirable semaphore')
  end
  return v
end

-- psem_now is the server's time in ms.
local function psem_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- psem_id is the 16 bytes of a permit id given as 32 hex digits.
local function psem_id(hex)
  return (string.gsub(hex, '%x%x', function(h) return string.char(tonumber(h, 16)) end))
end

-- psem_reclaim gives back the permits expired by now, at most limit of
-- them (nil: all), and publishes the permits available when they are
-- more than none, as Redisson does. It returns how many it gave back.
local function psem_reclaim(name, zset, channel, now, limit, how)
  local ids
  if limit then
    ids = redis.call('ZRANGEBYSCORE', zset, 0, now, 'LIMIT', 0, limit)
  else
    ids = redis.call('ZRANGEBYSCORE', zset, 0, now)
  end
  if #ids == 0 then
    return 0
  end
  for _, id in ipairs(ids) do
    redis.call('ZREM', zset, id)
  end
  local v = redis.call('INCRBY', name, #ids)
  if v > 0 then
    rpublish(channel, tostring(v), how)
  end
  return #ids
end
