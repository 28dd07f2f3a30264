-- hostload.lua: bring a host's spilled URLs back (spill.py), atomically with respect
-- to the host leaving the active set.
-- KEYS[1] active set, KEYS[2] the host's back queue, KEYS[3] a front queue,
-- KEYS[4] the shard's spilled-URL counter. ARGV[1] host, ARGV[2..] entries.
-- An active host gets them at the tail of its back queue; an inactive one through the
-- front queue (refill activates it), so no back queue ever exists without its host.
-- Returns the number of entries loaded.
local target = KEYS[3]
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then
  target = KEYS[2]
end
for i = 2, #ARGV, 1000 do
  redis.call('RPUSH', target, unpack(ARGV, i, math.min(#ARGV, i + 999)))
end
redis.call('DECRBY', KEYS[4], #ARGV - 1)
return #ARGV - 1
