-- ack.lua: fetched URLs whose pages were handed on to parse leave the hand-off zset.
-- KEYS[1] the shard's hand-off zset, KEYS[2] the shard's queued-URL counter, KEYS[3] the
-- hand-off owner hash, KEYS[4] the parsing hash (page group id -> its entries).
-- ARGV[1] the page group they went to parse in, ARGV[2..] the entries (as complete.lua
-- parked them).
-- They leave the queued count, and are kept under their group until its parse workers
-- have it (orphan.lua's caller puts them back if that node is lost first; maintenance
-- forgets a group's entries once the group is no longer in flight).
-- Returns how many were still parked.
local kept = {}
for i = 2, #ARGV do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    redis.call('HDEL', KEYS[3], ARGV[i])
    kept[#kept + 1] = ARGV[i]
  end
end
if #kept > 0 then
  redis.call('DECRBY', KEYS[2], #kept)
  redis.call('HSET', KEYS[4], ARGV[1], table.concat(kept, '\n'))
end
return #kept
