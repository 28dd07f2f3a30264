-- lease.lua: refill back queues from the front queues, then lease ready hosts (get_urls).
-- KEYS[1] active set, KEYS[2] ready zset, KEYS[3] lease zset, KEYS[4] te hash,
-- KEYS[5] lease owner hash, KEYS[6..5+F] front queues (priority 0 first).
-- ARGV[1] now, ARGV[2] lease seconds, ARGV[3] max hosts to lease, ARGV[4] B (max active
-- hosts), ARGV[5] back-queue key prefix, ARGV[6] random seed, ARGV[7] max refill moves,
-- ARGV[8] per-host back-queue cap (0 = none), ARGV[9] the shard's overflow list (same
-- hash tag): URLs of a host whose back queue is at the cap go there, then to disk;
-- ARGV[10] who the leases are for ('' = nobody yet): a fetch process, or the session
-- wake leases them for (see orphan.lua).
-- ARGV[11] the page budget (0 or absent: none), ARGV[12] its counter's field, ARGV[13] the
-- number N of budget keys that end KEYS: the counters' hash, then the lease zset of every
-- shard (all on this server). Every leased host is owed a page, so no more hosts are leased
-- than the budget has pages left after the pages counted and the hosts leased: checked
-- here, in the same step as the lease, it holds however many processes lease at once.
-- Back queues ``<prefix><host>`` share the shard's hash tag, so they are in the same slot.
-- Refill (Mercator): while fewer than B hosts are active, draw a front queue weighted
-- 2^(F-1-level) among the non-empty ones, pop its head; a URL of an active host joins
-- that host's back queue, any other host becomes active and enters the ready heap at
-- its remembered te (or now).
-- Lease: hosts with te <= now leave the ready heap and get a lease deadline; the head
-- URL stays in the back queue until complete.lua consumes it, so a dead worker loses
-- nothing.
-- Returns {moved, host1, entry1, deadline1, host2, ...}.
local active, ready, lease, te_hash, owners = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local max_pages = tonumber(ARGV[11] or '0')
local nbudget = tonumber(ARGV[13] or '0')
local F = #KEYS - 5 - nbudget
local owner = ARGV[10] or ''
local now = tonumber(ARGV[1])
local deadline = now + tonumber(ARGV[2])
local max_hosts = tonumber(ARGV[3])
local B = tonumber(ARGV[4])
local qprefix = ARGV[5]
math.randomseed(tonumber(ARGV[6]))
local max_moves = tonumber(ARGV[7])
local cap = tonumber(ARGV[8])
local overflow = ARGV[9]

local moved = 0
while moved < max_moves and redis.call('SCARD', active) < B do
  local total, weights = 0, {}
  for l = 1, F do
    if redis.call('LLEN', KEYS[5 + l]) > 0 then
      weights[l] = 2 ^ (F - l)
      total = total + weights[l]
    end
  end
  if total == 0 then break end
  local r = math.random() * total
  local pick = F
  for l = 1, F do
    if weights[l] then
      if r < weights[l] then pick = l break end
      r = r - weights[l]
    end
  end
  local entry = redis.call('LPOP', KEYS[5 + pick])
  -- entries are "<depth> <tries> <hops> <kind> <url>"; the host is the URL's authority
  -- (the politeness key of a normalized URL), so front entries need not repeat it
  local host = string.match(entry, '^[^ ]+ [^ ]+ [^ ]+ [^ ]+ [%a][%w+.-]*://([^/?#]+)')
  if host and cap > 0 and redis.call('LLEN', qprefix .. host) >= cap then
    redis.call('RPUSH', overflow, entry)  -- a hot host: spill.py moves these to disk
  elseif host then
    redis.call('RPUSH', qprefix .. host, entry)
    if redis.call('SADD', active, host) == 1 then
      local te = tonumber(redis.call('HGET', te_hash, host) or now)
      redis.call('HDEL', te_hash, host)
      redis.call('ZADD', ready, te, host)
    end
  end
  moved = moved + 1
end

if max_pages > 0 and max_hosts > 0 then
  local first = #KEYS - nbudget + 1
  local room = max_pages - tonumber(redis.call('HGET', KEYS[first], ARGV[12]) or '0')
  for i = first + 1, #KEYS do
    room = room - redis.call('ZCARD', KEYS[i])
  end
  max_hosts = math.max(0, math.min(max_hosts, room))
end

local out = {moved}
if max_hosts > 0 then
  local hosts = redis.call('ZRANGEBYSCORE', ready, '-inf', now, 'LIMIT', 0, max_hosts)
  for _, host in ipairs(hosts) do
    redis.call('ZREM', ready, host)
    local head = redis.call('LINDEX', qprefix .. host, 0)
    if head then
      redis.call('ZADD', lease, deadline, host)
      if owner ~= '' then
        redis.call('HSET', owners, host, owner)
      end
      out[#out + 1] = host
      out[#out + 1] = head
      out[#out + 1] = tostring(deadline)
    else
      redis.call('SREM', active, host)
    end
  end
end
return out
