-- orphan.lua: hand over at once the leases a lost node held (renew.lua records which
-- node renewed each lease last), and make the fetched URLs of its hosts that wait for
-- its parse workers (hand-off entries) due now, so handoff.lua queues them again
-- instead of after their deadline; forget owner entries of hosts no longer leased.
-- KEYS[1] lease zset, KEYS[2] ready zset, KEYS[3] lease owner hash, KEYS[4] hand-off zset.
-- ARGV[1] the lost node's name, ARGV[2] now, ARGV[3] LEASE_S. Returns the hosts put back.
-- A host comes back at its next contact when its session held it between requests and
-- had not renewed it since (its lease then ends at te + LEASE_S, see complete.lua), else
-- now: the node's last request started at least 2/3 of NODE_TTL_S ago (the claim's last
-- renewal), which covers delays up to that; a longer crawl delay is not known here.
-- A host leased by wake to a live session that has not renewed it yet may still name
-- the lost node: it goes back too, before any request (sessions renew before fetching).
local owners = redis.call('HGETALL', KEYS[3])
local out, lost = {}, {}
for i = 1, #owners, 2 do
  local host, owner = owners[i], owners[i + 1]
  local leased = redis.call('ZSCORE', KEYS[1], host)
  if owner == ARGV[1] then
    lost[host] = true
  end
  if not leased then
    redis.call('HDEL', KEYS[3], host)
  elseif owner == ARGV[1] then
    redis.call('HDEL', KEYS[3], host)
    redis.call('ZREM', KEYS[1], host)
    redis.call('ZADD', KEYS[2], math.max(tonumber(ARGV[2]), tonumber(leased) - tonumber(ARGV[3])), host)
    out[#out + 1] = host
  end
end
if next(lost) then
  for _, entry in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
    local host = string.match(entry, '^[^ ]+ [^ ]+ [^ ]+ [^ ]+ [%a][%w+.-]*://([^/?#]+)')
    if host and lost[host] then
      redis.call('ZADD', KEYS[4], ARGV[2], entry)
    end
  end
end
return out
