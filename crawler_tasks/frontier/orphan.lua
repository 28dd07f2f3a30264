-- orphan.lua: hand over at once what a lost fetch process held: the hosts whose leases
-- it renewed last (renew.lua records the process), and the fetched URLs it parked
-- whose pages it never handed on (complete.lua records the process), made due now so
-- that handoff.lua queues them again instead of after their deadline.
-- KEYS[1] lease zset, KEYS[2] ready zset, KEYS[3] lease owner hash, KEYS[4] hand-off zset,
-- KEYS[5] hand-off owner hash.
-- ARGV[1] the lost owner (a fetch process; or a node name, for leases renewed by a
-- client that runs no heartbeat), ARGV[2] now, ARGV[3] LEASE_S, ARGV[4] the hosts'
-- politeness hash key prefix (same hash tag), ARGV[5] MIN_DELAY_S, ARGV[6] the longest
-- Crawl-delay honoured (0: none).
-- A host comes back at its next contact when its session held it between requests and
-- had not renewed it since (its lease then ends at te + LEASE_S, see complete.lua), and
-- never before one request gap (min delay or its Crawl-delay) from now, nor before its
-- backoff ends: the process may have died in an exchange with it.
-- Returns {parked entries made due, host put back, ...}.
local now = tonumber(ARGV[2])
local out = {0}
local owners = redis.call('HGETALL', KEYS[3])
for i = 1, #owners, 2 do
  local host, owner = owners[i], owners[i + 1]
  if owner == ARGV[1] then
    redis.call('HDEL', KEYS[3], host)
    local leased = redis.call('ZSCORE', KEYS[1], host)
    if leased then
      local hs = redis.call('HMGET', ARGV[4] .. host, 'crawl_delay_s', 'parked_until')
      local gap = tonumber(ARGV[5])
      local delay = tonumber(hs[1] or '')
      if delay and tonumber(ARGV[6]) > 0 then
        gap = math.max(gap, math.min(delay, tonumber(ARGV[6])))
      end
      local te = math.max(now + gap, tonumber(leased) - tonumber(ARGV[3]), tonumber(hs[2] or '') or 0)
      redis.call('ZREM', KEYS[1], host)
      redis.call('ZADD', KEYS[2], te, host)
      out[#out + 1] = host
    end
  end
end
local parked = redis.call('HGETALL', KEYS[5])
for i = 1, #parked, 2 do
  if parked[i + 1] == ARGV[1] then
    out[1] = out[1] + redis.call('ZADD', KEYS[4], 'XX', 'CH', now, parked[i])
  end
end
return out
