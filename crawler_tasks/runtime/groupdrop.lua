-- groupdrop.lua: give up the page groups a lost node held, atomically with groupclaim.lua
-- (a group a live node took meanwhile stays with it).
-- KEYS[1] the group owner hash, KEYS[2] page groups in flight (zset), KEYS[3] the set of
-- page groups given up, KEYS[4] the hash of the workers running their tasks. ARGV[1] the
-- lost node.
-- Owner entries of groups no longer in flight are dropped too.
-- Returns the ids of the groups given up (their pages are to be fetched again).
local owners = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #owners, 2 do
  local group, node = owners[i], owners[i + 1]
  if not redis.call('ZSCORE', KEYS[2], group) then
    redis.call('HDEL', KEYS[1], group)
  elseif node == ARGV[1] then
    redis.call('HDEL', KEYS[1], group)
    redis.call('HDEL', KEYS[4], group)
    redis.call('ZREM', KEYS[2], group)
    redis.call('SADD', KEYS[3], group)
    out[#out + 1] = group
  end
end
return out
