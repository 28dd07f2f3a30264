-- handoff.lua: fetched URLs whose page never reached parse (their worker died) go back
-- to the head of their host's back queue, to be fetched again.
-- KEYS[1] the shard's hand-off zset, KEYS[2] active set, KEYS[3] ready zset, KEYS[4] te hash,
-- KEYS[5] the hand-off owner hash, KEYS[6] lease zset.
-- ARGV[1] now, ARGV[2] back-queue key prefix (same hash tag as the keys), ARGV[3] max entries,
-- ARGV[4] entries parked until then are due ('+inf': all).
-- A host that had left the active set comes back at its remembered te (or now). A host
-- leased meanwhile (another session took it over) keeps its head, the URL its session is
-- fetching: the entry goes right after it (pushed before it, the head would be fetched,
-- not consumed, and fetched again). An entry already in its host's queue is only dropped
-- from the zset: a live snapshot can hold both copies (it read the queue before the turn
-- parked the entry), and queued twice it would be fetched and recorded twice.
-- Returns the number of entries put back (not those queued already). Entries are
-- "<depth> <tries> <hops> <kind> <url>".
local entries = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[4], 'LIMIT', 0, tonumber(ARGV[3]))
local now = tonumber(ARGV[1])
local returned = 0
for _, entry in ipairs(entries) do
  redis.call('ZREM', KEYS[1], entry)
  redis.call('HDEL', KEYS[5], entry)
  local host = string.match(entry, '^[^ ]+ [^ ]+ [^ ]+ [^ ]+ [%a][%w+.-]*://([^/?#]+)')
  local queue = host and ARGV[2] .. host
  if host and not redis.call('LPOS', queue, entry) then
    local head = redis.call('ZSCORE', KEYS[6], host) and redis.call('LINDEX', queue, 0)
    if head then
      redis.call('LINSERT', queue, 'AFTER', head, entry)
    else
      redis.call('LPUSH', queue, entry)
    end
    if redis.call('SADD', KEYS[2], host) == 1 then
      local te = tonumber(redis.call('HGET', KEYS[4], host) or now)
      redis.call('HDEL', KEYS[4], host)
      redis.call('ZADD', KEYS[3], te, host)
    end
    returned = returned + 1
  end
end
return returned
