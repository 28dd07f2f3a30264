-- reclaim.lua: at resume, nothing of the dead crawl's processes runs any more: give back
-- every host they held and every fetched URL they had not handed on (no lease or
-- hand-off deadline need pass first).
-- KEYS[1] lease zset, KEYS[2] ready zset, KEYS[3] hand-off zset, KEYS[4] active set,
-- KEYS[5] te hash, KEYS[6] lease owner hash, KEYS[7] hand-off owner hash, KEYS[8] parsing
-- hash (page groups handed to parse: the old processes' parse messages stay in the
-- broker, and a group is not fetched again for its node being gone).
-- ARGV[1] now, ARGV[2] back-queue key prefix (same hash tag as the keys).
-- Leased hosts re-enter the ready heap at now. Parked entries go back to the head of
-- their host's queue (as handoff.lua does); a host that had left the active set comes
-- back at its remembered te (or now). Entries are "<depth> <tries> <hops> <kind> <url>".
-- Returns {hosts given back, entries put back}.
local now = tonumber(ARGV[1])
local hosts = redis.call('ZRANGE', KEYS[1], 0, -1)
for _, host in ipairs(hosts) do
  redis.call('ZADD', KEYS[2], now, host)
end
redis.call('DEL', KEYS[1])
local entries = redis.call('ZRANGE', KEYS[3], 0, -1)
local returned = 0
for _, entry in ipairs(entries) do
  local host = string.match(entry, '^[^ ]+ [^ ]+ [^ ]+ [^ ]+ [%a][%w+.-]*://([^/?#]+)')
  -- one already queued is a live snapshot's second copy (handoff.lua)
  if host and not redis.call('LPOS', ARGV[2] .. host, entry) then
    redis.call('LPUSH', ARGV[2] .. host, entry)
    returned = returned + 1
    if redis.call('SADD', KEYS[4], host) == 1 then
      local te = tonumber(redis.call('HGET', KEYS[5], host) or now)
      redis.call('HDEL', KEYS[5], host)
      redis.call('ZADD', KEYS[2], te, host)
    end
  end
end
redis.call('DEL', KEYS[3], KEYS[6], KEYS[7], KEYS[8])
return {#hosts, returned}
