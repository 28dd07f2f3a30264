-- add.lua: URL-seen test and enqueue for one shard, atomically (put_discovered).
-- KEYS[1..F]          front queues, priority 0 (highest) .. F-1
-- KEYS[F+1..F+S]      Bloom filter segments
-- KEYS[F+S+1]         exact seen set (URLs that must never be lost to a false positive)
-- ARGV[1] F, ARGV[2] S, ARGV[3] k (hashes per URL), ARGV[4] m (bits per segment)
-- then per URL, 6 values: force (1 = seed: exact set decides), level, entry, segment
--   (1-based), h1, h2; bit j (0..k-1) is (h1 + j*h2) mod m (exact: h1, h2 < 2^31);
--   the entry is pushed to KEYS[level+1].
-- Returns one integer per URL: 1 enqueued, 0 already seen.
local F = tonumber(ARGV[1])
local S = tonumber(ARGV[2])
local k = tonumber(ARGV[3])
local m = tonumber(ARGV[4])
local seen_key = KEYS[F + S + 1]
local out = {}
local i = 5
while i <= #ARGV do
  local force = ARGV[i] == '1'
  local level = tonumber(ARGV[i + 1])
  local entry = ARGV[i + 2]
  local seg = KEYS[F + tonumber(ARGV[i + 3])]
  local h1, h2 = tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])
  local all_set = true
  for j = 0, k - 1 do
    if redis.call('SETBIT', seg, (h1 + j * h2) % m, 1) == 0 then
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
  i = i + 6
end
return out
