-- recount.lua: set a shard's queued-URL counter from what its keys hold, while none of
-- its hosts is active (then no back queue holds a URL: lease.lua and complete.lua drop a
-- host whose queue ran dry from the active set). The counter is kept by each script that
-- moves URLs; a checkpoint read key by key while the crawl ran can restore it out of step
-- with the queues, and a crawl would then wait for URLs that are nowhere.
-- KEYS[1] queued counter, KEYS[2] active set, KEYS[3] hand-off zset, KEYS[4] overflow list,
-- KEYS[5] spilled counter (URLs in spill files), KEYS[6..] front queues and spill staging lists.
-- Returns the counter's error (old - new), or false while a host is active.
if redis.call('SCARD', KEYS[2]) > 0 then return false end
local n = redis.call('ZCARD', KEYS[3]) + redis.call('LLEN', KEYS[4]) + tonumber(redis.call('GET', KEYS[5]) or '0')
for i = 6, #KEYS do n = n + redis.call('LLEN', KEYS[i]) end
local was = tonumber(redis.call('GET', KEYS[1]) or '0')
if was ~= n then redis.call('SET', KEYS[1], n) end
return was - n
