-- groupstale.lua: page groups past their deadline, atomically with end_batch and
-- groupclaim.lua: each is given up (its pages are fetched again) or, when a worker has its
-- message (delivered again, or only just taken), kept in flight with a new deadline.
-- KEYS[1] page groups in flight (zset), KEYS[2] the group owner hash, KEYS[3] the set of
-- page groups given up, KEYS[4] the hash of groups delivered again (group -> times),
-- KEYS[5] the hash of the workers running their tasks.
-- ARGV[1] now, ARGV[2] the new deadline, ARGV[3] n, ARGV[4..3+n] the groups whose message
-- was delivered again (counted), ARGV[4+n..] groups whose message a worker only just took.
-- A group that ended meanwhile (enqueued) or got a later deadline is left alone.
-- Returns the ids of the groups given up.
local now = tonumber(ARGV[1])
local n = tonumber(ARGV[3])
local kept = {}
for i = 4, #ARGV do
  kept[ARGV[i]] = i < 4 + n
end
local out = {}
for _, group in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
  if kept[group] ~= nil then
    redis.call('ZADD', KEYS[1], ARGV[2], group)
    if kept[group] then
      redis.call('HINCRBY', KEYS[4], group, 1)
    end
  else
    redis.call('ZREM', KEYS[1], group)
    redis.call('HDEL', KEYS[2], group)
    redis.call('HDEL', KEYS[4], group)
    redis.call('HDEL', KEYS[5], group)
    redis.call('SADD', KEYS[3], group)
    out[#out + 1] = group
  end
end
return out
