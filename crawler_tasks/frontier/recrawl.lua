-- recrawl.lua: move URLs whose next visit is due back into a front queue (continuous mode),
-- at most as many as the shard's revisit budget allows (a token bucket), the most overdue first.
-- KEYS[1] due zset (member "<level> <url>", score = next visit, epoch s),
-- KEYS[2] the shard's queued-URL counter, KEYS[3] the shard's recrawl hash (fields tokens,
-- refill_at: the limiter), KEYS[4..] front queues (priority 0 first).
-- ARGV[1] now, ARGV[2] most URLs to move in this call, ARGV[3] revisits per second (0: no
-- limit), ARGV[4] most tokens saved up (a burst), ARGV[5] the latest next visit moved (now plus
-- half the check's period: a visit due between two checks is as early as late, not always late).
-- The URL-seen filter is not consulted (these URLs are known on purpose). The host is
-- the URL's authority, which is the politeness key of a normalized URL.
-- Returns the number of URLs moved.
local now, limit, rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if rate > 0 then
  local state = redis.call('HMGET', KEYS[3], 'tokens', 'refill_at')
  local tokens = tonumber(state[1]) or burst
  local since = tonumber(state[2]) or now
  tokens = math.min(burst, tokens + math.max(0, now - since) * rate)
  limit = math.min(limit, math.floor(tokens))
  redis.call('HSET', KEYS[3], 'refill_at', ARGV[1], 'tokens', tostring(tokens))
end
if limit < 1 then
  return 0
end
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[5], 'LIMIT', 0, limit)
local F = #KEYS - 3
for _, member in ipairs(due) do
  redis.call('ZREM', KEYS[1], member)
  local level, url = string.match(member, '^(%d+) (.*)$')
  local host = url and string.match(url, '^[%a][%w+.-]*://([^/?#]+)')
  if host then
    local l = math.min(tonumber(level), F - 1)
    redis.call('RPUSH', KEYS[4 + l], '0 0 0 p ' .. url)
    redis.call('INCR', KEYS[2])
  end
end
if rate > 0 and #due > 0 then
  redis.call('HINCRBYFLOAT', KEYS[3], 'tokens', -#due)
end
return #due
