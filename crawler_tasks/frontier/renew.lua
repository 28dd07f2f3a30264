-- renew.lua: extend leases a worker is about to use, so a batch that waited in the
-- broker does not fetch a host whose lease already expired and was given to another.
-- KEYS[1] lease zset. ARGV[1] new deadline, then pairs host, token.
-- Returns per pair the new token (string) or false when the lease is gone.
local out = {}
for i = 2, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and math.abs(tonumber(score) - tonumber(ARGV[i + 1])) <= 0.001 then
    redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i])
    out[#out + 1] = ARGV[1]
  else
    out[#out + 1] = false
  end
end
return out
