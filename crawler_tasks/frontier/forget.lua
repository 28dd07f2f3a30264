-- forget.lua: queued entries whose page is already recorded (pages.jsonl) leave the
-- frontier, so a resume never fetches them again.
-- KEYS[1] the host's back queue, KEYS[2] the shard's queued-URL counter, KEYS[3] active
-- set, KEYS[4] ready zset, KEYS[5] te hash.
-- ARGV[1] host, ARGV[2] now, ARGV[3..] the entries to remove (one occurrence each).
-- A queue left empty takes its host out of the active set and the ready heap (its te is
-- remembered), as complete.lua does.
-- Returns how many entries were removed.
local n = 0
for i = 3, #ARGV do
  n = n + redis.call('LREM', KEYS[1], 1, ARGV[i])
end
if n > 0 then
  redis.call('DECRBY', KEYS[2], n)
end
if redis.call('LLEN', KEYS[1]) == 0 and redis.call('SREM', KEYS[3], ARGV[1]) == 1 then
  local te = redis.call('ZSCORE', KEYS[4], ARGV[1]) or ARGV[2]
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('HSET', KEYS[5], ARGV[1], te)
end
return n
