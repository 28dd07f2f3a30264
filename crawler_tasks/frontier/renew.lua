-- renew.lua: extend leases a worker is about to use, so a batch that waited in the
-- broker does not fetch a host whose lease already expired and was given to another.
-- KEYS[1] lease zset, KEYS[2] lease owner hash. ARGV[1] new deadline, ARGV[2] the
-- renewing node's name (its hosts are handed over when it is lost: orphan.lua), then
-- pairs host, token. Returns per pair the new token (string) or false when the lease is gone.
local out = {}
for i = 3, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and math.abs(tonumber(score) - tonumber(ARGV[i + 1])) <= 0.001 then
    redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i])
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[2])
    out[#out + 1] = ARGV[1]
  else
    out[#out + 1] = false
  end
end
return out
