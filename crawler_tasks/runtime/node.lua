-- Claim or renew a node name for one machine (runtime/nodes.py).
-- KEYS[1] = <prefix>:{g}:node:<name>, KEYS[2] = <prefix>:{g}:nodes (names claimed)
-- ARGV[1] = this machine's node id, ARGV[2] = time to live in ms, ARGV[3] = the name
-- Returns "" when the name is ours (claimed or renewed), else the id that holds it.
local holder = redis.call("GET", KEYS[1])
if holder and holder ~= ARGV[1] then
  return holder
end
redis.call("SET", KEYS[1], ARGV[1], "PX", tonumber(ARGV[2]))
redis.call("SADD", KEYS[2], ARGV[3])
return ""
