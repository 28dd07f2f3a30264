-- add.lua: URL-seen test and enqueue for one shard, atomically (put_discovered).
-- KEYS[1..F]          front queues, priority 0 (highest) .. F-1
-- KEYS[F+1..F+S]      Bloom filter segments
-- KEYS[F+S+1]         exact seen set (URLs that must never be lost to a false positive)
-- ARGV[1] F, ARGV[2] S, ARGV[3] k (bit positions per URL)
-- then per URL, 4 + k values: force (1 = seed: exact set decides), level, entry, segment
--   (1-based), k bit positions inside the segment; the entry is pushed to KEYS[level+1].
-- Returns one integer per URL: 1 enqueued, 0 already seen.
local F = tonumber(ARGV[1])
local S = tonumber(ARGV[2])
local k = tonumber(ARGV[3])
local seen_key = KEYS[F + S + 1]
local out = {}
local i = 4
while i <= #ARGV do
  local force = ARGV[i] == '1'
  local level = tonumber(ARGV[i + 1])
  local entry = ARGV[i + 2]
  local seg = KEYS[F + tonumber(ARGV[i + 3])]
  local all_set = true
  for j = 1, k do
    if redis.call('SETBIT', seg, ARGV[i + 3 + j], 1) == 0 then
      all_set = false
    end
  end
  local fresh
  if force then
    local url = string.match(entry, '([^ ]+)$')
    fresh = redis.call('SADD', seen_key, url) == 1
  else
    fresh = not all_set
  end
  if fresh then
    redis.call('RPUSH', KEYS[level + 1], entry)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
  i = i + 4 + k
end
return out
