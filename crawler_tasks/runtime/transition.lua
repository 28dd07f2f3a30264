-- transition.lua: move the crawl to a new state if it is in one of the given states.
-- KEYS[1] the crawl's control hash (fields state, reason, state_at, idle, epoch, started_at).
-- ARGV[1] new state, ARGV[2] reason, ARGV[3] now (epoch s),
-- ARGV[4] states it may move from, space-separated ('new' = no state yet; '' = any),
-- ARGV[5] the seed epoch the caller read before deciding ('' = any): a seed added since
--   then (``epoch`` moved) cancels the move, so a crawl is never finished over new seeds,
-- ARGV[6] '1' when the crawl ends for lack of work (a seed may revive it), else '0'.
-- A crawl started from 'new' also gets started_at = now.
-- Returns {previous state ('new' when none), 1 if moved else 0}.
local current = redis.call('HGET', KEYS[1], 'state') or 'new'
local allowed = ARGV[4] == ''
for s in string.gmatch(ARGV[4], '%S+') do
  if s == current then allowed = true end
end
if not allowed then return {current, 0} end
if ARGV[5] ~= '' and (redis.call('HGET', KEYS[1], 'epoch') or '0') ~= ARGV[5] then
  return {current, 0}
end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'reason', ARGV[2], 'state_at', ARGV[3], 'idle', ARGV[6])
if current == 'new' then redis.call('HSET', KEYS[1], 'started_at', ARGV[3]) end
return {current, 1}
