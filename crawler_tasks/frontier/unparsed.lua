-- unparsed.lua: page groups whose node was lost before its parse workers had them (their
-- bodies are in that node's spool folder): their fetched URLs go back to the head of
-- their hosts' back queues, to be fetched again.
-- KEYS[1] parsing hash (page group id -> entries, newline-separated), KEYS[2] active set,
-- KEYS[3] ready zset, KEYS[4] te hash, KEYS[5] the shard's queued-URL counter, KEYS[6]
-- lease zset.
-- ARGV[1] now, ARGV[2] back-queue key prefix (same hash tag as the keys), ARGV[3..] group ids.
-- A host that had left the active set comes back at its remembered te (or now), and a
-- leased host keeps its head, as in handoff.lua. Returns the number of entries put back.
local now = tonumber(ARGV[1])
local n = 0
for g = 3, #ARGV do
  local raw = redis.call('HGET', KEYS[1], ARGV[g])
  if raw then
    redis.call('HDEL', KEYS[1], ARGV[g])
    local entries = {}
    for entry in string.gmatch(raw, '[^\n]+') do
      entries[#entries + 1] = entry
    end
    for i = #entries, 1, -1 do   -- the first fetched ends up first again
      local entry = entries[i]
      local host = string.match(entry, '^[^ ]+ [^ ]+ [^ ]+ [^ ]+ [%a][%w+.-]*://([^/?#]+)')
      if host then
        local queue = ARGV[2] .. host
        local head = redis.call('ZSCORE', KEYS[6], host) and redis.call('LINDEX', queue, 0)
        if head then
          redis.call('LINSERT', queue, 'AFTER', head, entry)
        else
          redis.call('LPUSH', queue, entry)
        end
        n = n + 1
        if redis.call('SADD', KEYS[2], host) == 1 then
          local te = tonumber(redis.call('HGET', KEYS[4], host) or now)
          redis.call('HDEL', KEYS[4], host)
          redis.call('ZADD', KEYS[3], te, host)
        end
      end
    end
  end
end
if n > 0 then
  redis.call('INCRBY', KEYS[5], n)
end
return n
