-- ack.lua: fetched URLs whose pages were handed on to parse leave the hand-off zset.
-- KEYS[1] the shard's hand-off zset, KEYS[2] the shard's queued-URL counter.
-- ARGV: the entries (as complete.lua parked them).
-- Returns how many were still parked (each one leaves the queued count).
local n = 0
for i = 1, #ARGV do
  n = n + redis.call('ZREM', KEYS[1], ARGV[i])
end
if n > 0 then
  redis.call('DECRBY', KEYS[2], n)
end
return n
