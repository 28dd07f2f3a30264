-- Near-duplicate check-and-add on one part of the permuted-blocks simhash index.
--
-- A fingerprint is 16 hex digits = four 16-bit blocks (block 1 = digits 1-4), then, for
-- a page checked with its NearPrint, 16 hex digits of its check. Bucket (b, v) is a hash
-- fingerprint -> url  of the pages whose block b equals v. An item reads its own four
-- buckets (two fingerprints within 3 bits agree on a block: no scan of the index) and
-- the buckets of its fragile bits flipped (read only: a copy whose few added words
-- flipped one bit of a block still agrees on the flipped value).
-- A candidate is a match within max_distance bits; further, within wide_distance, only
-- when both carry a check and their checks are within check_bits (a bare fingerprint,
-- of an old entry or of a page known by its simhash alone, never goes past max_distance).
-- Lua 5.1 has no 64-bit integers: distances are summed block by block (bit.bxor on
-- 16-bit numbers, popcount by a byte table), stopping as soon as they pass the best so
-- far. Buckets never grow past max_bucket entries (adds to a full bucket are skipped and
-- counted), so one probe compares at most max_bucket candidates.
--
-- KEYS: the bucket key of every probe, in ARGV order; last: the part's stats hash.
-- ARGV: max_bucket, max_distance, wide_distance, check_bits, n_items, then per item:
--       url, fingerprint hex (16 or 32 digits), n_probes, then per probe the block
--       number (1-4) of one of the item's own buckets, or 0 for a flipped one.
-- Returns per item, in order: false, or "<distance> <url>" of the closest matching page
-- (a page never matches its own URL). Items are then added to their own buckets, in
-- order, so a later item of the same batch can match an earlier one.

local bxor, band, rshift = bit.bxor, bit.band, bit.rshift
local sub, tonumber = string.sub, tonumber

local cap = tonumber(ARGV[1])
local maxd = tonumber(ARGV[2])
local wide = tonumber(ARGV[3])
local check_bits = tonumber(ARGV[4])
local n_items = tonumber(ARGV[5])

local pc = {[0] = 0}
for i = 1, 255 do pc[i] = pc[math.floor(i / 2)] + i % 2 end

-- bits apart of the 16-bit groups first..last of two fingerprints, or limit + 1 once past limit
local function apart(q, f, first, last, limit)
  local d = 0
  for j = first, last do
    local x = bxor(q[j], tonumber(sub(f, 4 * j - 3, 4 * j), 16))
    d = d + pc[band(x, 255)] + pc[rshift(x, 8)]
    if d > limit then return limit + 1 end
  end
  return d
end

local out = {}
local a, k = 6, 1
local probes, pages, compared, added, full, confirmed = 0, 0, 0, 0, 0, 0

for it = 1, n_items do
  local url, fp, n_probes = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  a = a + 3
  local q = {}
  for j = 1, #fp / 4 do q[j] = tonumber(sub(fp, 4 * j - 3, 4 * j), 16) end
  local checked = #q == 8
  local best_d, best = (checked and wide or maxd) + 1, false
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
      local d = apart(q, f, 1, 4, best_d - 1)
      if d < best_d and entries[e + 1] ~= url
          and (d <= maxd or (checked and #f == 32 and apart(q, f, 5, 8, check_bits) <= check_bits)) then
        best_d, best = d, entries[e + 1]
      end
    end
    compared = compared + n / 2
    if block > 0 then
      if #entries < 2 * cap then
        added = added + redis.call('HSETNX', key, fp, url)
      else
        full = full + 1
      end
    end
  end
  if best then
    out[it] = best_d .. ' ' .. best
    if best_d > maxd then confirmed = confirmed + 1 end
  else
    out[it] = false
  end
end

local stats = KEYS[#KEYS]
redis.call('HINCRBY', stats, 'probes', probes)
redis.call('HINCRBY', stats, 'pages', pages)
redis.call('HINCRBY', stats, 'compared', compared)
redis.call('HINCRBY', stats, 'entries', added)
redis.call('HINCRBY', stats, 'full', full)
redis.call('HINCRBY', stats, 'confirmed', confirmed)
return out
