-- add.lua: URL-seen test, trap budgets and enqueue for one shard, atomically (put_discovered).
-- KEYS[1..F]     front queues, priority 0 (highest) .. F-1
-- KEYS[F+1..F+S] Bloom filter segments
-- KEYS[F+S+1]    exact seen set (seeds: never lost to a Bloom false positive)
-- KEYS[F+S+2]    hash host -> URLs enqueued for it (per-host budget)
-- KEYS[F+S+3]    hash host+path -> distinct query strings enqueued (facet traps)
-- KEYS[F+S+4]    set of seed hosts (they get the larger budget)
-- KEYS[F+S+5]    counter of URLs queued in the shard (front + back queues)
-- KEYS[F+S+6]    counter of fingerprints stored (exact mode)
-- KEYS[F+S+7..]  exact mode: the fingerprint buckets this call touches
-- ARGV[1] F, ARGV[2] S, ARGV[3] k (hashes per URL), ARGV[4] m (bits per segment),
-- ARGV[5] host budget, ARGV[6] seed-host budget, ARGV[7] max query variants per path
-- (budgets: 0 = none), ARGV[8] exact (1: the fingerprint sets decide, the Bloom filter is
-- kept in front for the readers of its bits), then per URL 11 values: force (1 = seed,
-- 2 = again), level, entry, segment (1-based), h1, h2, host, query key ('' when the URL has
-- no query), fingerprint bucket (its KEYS index; 0 when not exact), fingerprint member, the
-- host's own budget (a job's site rule; -1: the host and seed-host budgets above).
-- Bit j (0..k-1) of a URL is (h1 + j*h2) mod m (exact: h1, h2 < 2^31). Forced URLs skip
-- the budgets; an 'again' URL (fetched before, its page lost) is enqueued with no test and
-- no count.
-- Returns per URL: 1 enqueued, 0 already seen, 2 over its host's budget, 3 one query
-- variant too many for its path.
local F = tonumber(ARGV[1])
local S = tonumber(ARGV[2])
local k = tonumber(ARGV[3])
local m = tonumber(ARGV[4])
local host_budget = tonumber(ARGV[5])
local seed_budget = tonumber(ARGV[6])
local max_variants = tonumber(ARGV[7])
local seen_key = KEYS[F + S + 1]
local counts, variants, seed_hosts = KEYS[F + S + 2], KEYS[F + S + 3], KEYS[F + S + 4]
local queued, fp_count = KEYS[F + S + 5], KEYS[F + S + 6]
local exact = ARGV[8] == '1'
local out = {}
local bits = {}   -- BITFIELD's arguments after the key: SET u1 offset 1, k times
local i = 9
while i <= #ARGV do
  local force = ARGV[i] == '1'
  local again = ARGV[i] == '2'
  local level = tonumber(ARGV[i + 1])
  local entry = ARGV[i + 2]
  local seg = KEYS[F + tonumber(ARGV[i + 3])]
  local h1, h2 = tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])
  local host, qkey = ARGV[i + 6], ARGV[i + 7]
  local verdict = 1
  if not again then
    -- one BITFIELD for the k bits (k SETBITs were most of the script's calls)
    for j = 0, k - 1 do
      local at = 4 * j
      bits[at + 1], bits[at + 2], bits[at + 3], bits[at + 4] = 'SET', 'u1', (h1 + j * h2) % m, 1
    end
    local seen_before = true
    for _, old in ipairs(redis.call('BITFIELD', seg, unpack(bits))) do
      if old == 0 then seen_before = false end
    end
    if exact then
      seen_before = redis.call('SADD', KEYS[tonumber(ARGV[i + 8])], ARGV[i + 9]) == 0
      if not seen_before then redis.call('INCR', fp_count) end
    end
    if force then
      if redis.call('SADD', seen_key, string.match(entry, '([^ ]+)$')) == 0 then
        verdict = 0
      else
        redis.call('SADD', seed_hosts, host)
      end
    elseif seen_before then
      verdict = 0
    else
      local budget = tonumber(ARGV[i + 10])
      if budget < 0 then
        budget = host_budget
        if redis.call('SISMEMBER', seed_hosts, host) == 1 then budget = seed_budget end
      end
      if budget > 0 and tonumber(redis.call('HGET', counts, host) or 0) >= budget then
        verdict = 2
      elseif max_variants > 0 and qkey ~= '' and redis.call('HINCRBY', variants, qkey, 1) > max_variants then
        verdict = 3
      end
    end
  end
  if verdict == 1 then
    redis.call('RPUSH', KEYS[level + 1], entry)
    if not again then redis.call('HINCRBY', counts, host, 1) end
    redis.call('INCR', queued)
  end
  out[#out + 1] = verdict
  i = i + 11
end
return out
