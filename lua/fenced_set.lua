-- Write a value that only a token at least as new as the last one may replace.
-- KEYS[1] the resource: a hash, field value is the value, field token the
--         fencing token of its last write (decimal, no leading zeros).
-- ARGV[1] value, ARGV[2] token.
-- Returns 1 when written, 0 when the resource holds a newer token.
local last = redis.call('HGET', KEYS[1], 'token')
local t = ARGV[2]
if last and (#t < #last or (#t == #last and t < last)) then
  return 0
end
redis.call('HSET', KEYS[1], 'value', ARGV[1], 'token', t)
return 1
