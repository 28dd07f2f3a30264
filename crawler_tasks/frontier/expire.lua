-- expire.lua: put back hosts whose lease deadline passed (their worker died or hung).
-- KEYS[1] lease zset, KEYS[2] ready zset, KEYS[3] lease owner hash. ARGV[1] now.
-- The head URL never left the back queue, so it is simply fetched again later.
-- Returns the hosts put back.
local hosts = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
for _, host in ipairs(hosts) do
  redis.call('ZREM', KEYS[1], host)
  redis.call('HDEL', KEYS[3], host)
  redis.call('ZADD', KEYS[2], ARGV[1], host)
end
return hosts
