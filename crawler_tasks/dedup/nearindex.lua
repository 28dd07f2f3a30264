-- Near-duplicate check-and-add on one part of the permuted-blocks simhash index.
--
-- A fingerprint is 16 hex digits = four 16-bit blocks (block 1 = digits 1-4). Bucket
-- (b, v) is a hash  fingerprint hex -> url  of the pages whose block b equals v; two
-- fingerprints within 3 bits agree on at least one block, so probing the item's own
-- four buckets finds every indexed page within 3 bits (no scan of the index).
-- Lua 5.1 has no 64-bit integers: distances are summed block by block (bit.bxor on
-- 16-bit numbers, popcount by a byte table), stopping as soon as they exceed the
-- best so far. Buckets never grow past max_bucket entries (adds to a full bucket are
-- skipped and counted), so one probe compares at most max_bucket candidates.
--
-- KEYS: the bucket key of every probe, in ARGV order; last: the part's stats hash.
-- ARGV: max_bucket, max_distance, n_items, then per item:
--       url, fingerprint hex, n_probes, then the block number (1-4) of each probe.
-- Returns per item, in order: false, or "<distance> <url>" of the closest indexed
-- page (a page never matches its own URL). Items are then added to their buckets,
-- in order, so a later item of the same batch can match an earlier one.

local bxor, band, rshift = bit.bxor, bit.band, bit.rshift
local sub, tonumber = string.sub, tonumber

local cap = tonumber(ARGV[1])
local maxd = tonumber(ARGV[2])
local n_items = tonumber(ARGV[3])

local pc = {[0] = 0}
for i = 1, 255 do pc[i] = pc[math.floor(i / 2)] + i % 2 end

local out = {}
local a, k = 4, 1
local probes, pages, compared, added, full = 0, 0, 0, 0, 0

for it = 1, n_items do
  local url, fp, n_probes = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  a = a + 3
  local q = {tonumber(sub(fp, 1, 4), 16), tonumber(sub(fp, 5, 8), 16),
             tonumber(sub(fp, 9, 12), 16), tonumber(sub(fp, 13, 16), 16)}
  local best_d, best = maxd + 1, false
  for _ = 1, n_probes do
    local block = tonumber(ARGV[a])
    a = a + 1
    local key = KEYS[k]
    k = k + 1
    probes = probes + 1
    if block == 1 then pages = pages + 1 end
    local entries = redis.call('HGETALL', key)
    local n = #entries
    if n > 2 * cap then n = 2 * cap end
    for e = 1, n, 2 do
      local f = entries[e]
      local d = 0
      for j = 1, 4 do
        if j ~= block then
          local x = bxor(q[j], tonumber(sub(f, 4 * j - 3, 4 * j), 16))
          d = d + pc[band(x, 255)] + pc[rshift(x, 8)]
          if d >= best_d then break end
        end
      end
      if d < best_d and entries[e + 1] ~= url then
        best_d, best = d, entries[e + 1]
      end
    end
    compared = compared + n / 2
    if #entries < 2 * cap then
      added = added + redis.call('HSETNX', key, fp, url)
    else
      full = full + 1
    end
  end
  if best then out[it] = best_d .. ' ' .. best else out[it] = false end
end

local stats = KEYS[#KEYS]
redis.call('HINCRBY', stats, 'probes', probes)
redis.call('HINCRBY', stats, 'pages', pages)
redis.call('HINCRBY', stats, 'compared', compared)
redis.call('HINCRBY', stats, 'entries', added)
redis.call('HINCRBY', stats, 'full', full)
return out
