-- spill.lua: move the tail of an over-long front queue into a staging list, atomically.
-- KEYS[1] front queue, KEYS[2] staging list (written to disk by the caller, then deleted),
-- KEYS[3] the shard's spilled-URL counter.
-- ARGV[1] spill when the queue is longer than this, ARGV[2] chunk size.
-- The caller writes the staging list to a file and deletes it; a staging list found
-- non-empty (a crash in between) is written again, so nothing is lost (at worst a
-- chunk is queued twice). Returns the number of entries staged.
local len = redis.call('LLEN', KEYS[1])
local limit, chunk = tonumber(ARGV[1]), tonumber(ARGV[2])
if len <= limit or redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
local n = math.min(chunk, len - limit)
local tail = redis.call('LRANGE', KEYS[1], -n, -1)
for i = 1, #tail, 1000 do  -- unpack() of more than ~8,000 values overflows Lua's C stack
  redis.call('RPUSH', KEYS[2], unpack(tail, i, math.min(#tail, i + 999)))
end
redis.call('LTRIM', KEYS[1], 0, -n - 1)
redis.call('INCRBY', KEYS[3], n)
return n
