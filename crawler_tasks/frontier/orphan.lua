-- orphan.lua: hand over at once the leases a lost node held (renew.lua records which
-- node renewed each lease last); forget owner entries of hosts no longer leased.
-- KEYS[1] lease zset, KEYS[2] ready zset, KEYS[3] lease owner hash.
-- ARGV[1] the lost node's name, ARGV[2] now. Returns the hosts put back.
-- A host leased by wake to a live session that has not renewed it yet may still name
-- the lost node: it goes back too, before any request (sessions renew before fetching).
local owners = redis.call('HGETALL', KEYS[3])
local out = {}
for i = 1, #owners, 2 do
  local host, owner = owners[i], owners[i + 1]
  local leased = redis.call('ZSCORE', KEYS[1], host)
  if not leased then
    redis.call('HDEL', KEYS[3], host)
  elseif owner == ARGV[1] then
    redis.call('HDEL', KEYS[3], host)
    redis.call('ZREM', KEYS[1], host)
    redis.call('ZADD', KEYS[2], ARGV[2], host)
    out[#out + 1] = host
  end
end
return out
