-- recrawl.lua: move URLs whose next visit is due back into a front queue (continuous mode).
-- KEYS[1] due zset (member "<level> <url>", score = next visit, epoch s),
-- KEYS[2] the shard's queued-URL counter, KEYS[3..] front queues (priority 0 first).
-- ARGV[1] now, ARGV[2] most URLs to move.
-- The URL-seen filter is not consulted (these URLs are known on purpose). The host is
-- the URL's authority, which is the politeness key of a normalized URL.
-- Returns the number of URLs moved.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local F = #KEYS - 2
for _, member in ipairs(due) do
  redis.call('ZREM', KEYS[1], member)
  local level, url = string.match(member, '^(%d+) (.*)$')
  local host = url and string.match(url, '^[%a][%w+.-]*://([^/?#]+)')
  if host then
    local l = math.min(tonumber(level), F - 1)
    redis.call('RPUSH', KEYS[3 + l], '0 0 0 p ' .. url)
    redis.call('INCR', KEYS[2])
  end
end
return #due
