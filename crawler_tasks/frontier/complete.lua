-- complete.lua: a leased host's turn is over; consume or keep its head URL and set te.
-- KEYS[1] active set, KEYS[2] ready zset, KEYS[3] lease zset, KEYS[4] te hash,
-- KEYS[5] the host's back queue, KEYS[6] the shard's queued-URL counter, KEYS[7] the
-- shard's hand-off zset, KEYS[8] its owner hash (entry -> fetch process), KEYS[9] the
-- lease owner hash (host -> fetch process), then (with field/value pairs in ARGV[12..]) the
-- host's politeness hash, set from those pairs whatever happens, then (with a page budget)
-- the budget's keys: the counters' hash and the lease zset of every shard on this server.
-- ARGV[10] the page budget (0 or absent: none), ARGV[11] its counter's field: a host is
-- held for another page only while the pages counted (this turn's included: the caller
-- counts it first) and the hosts leased (this one included) are within the budget, checked
-- in the same step as the hold (see lease.lua). ARGV[12] '1': this call counts the turn's
-- page in that field itself (the budget's keys are passed), on its first run only.
-- ARGV[1] host, ARGV[2] lease token (deadline given by lease.lua), ARGV[3] action:
--   'done'  the head URL is finished (fetched, refused, or failed for good): pop it;
--   'retry' pop the head and append ARGV[6] (the same URL with tries + 1) at the tail;
--   'keep'  leave the head in place (robots.txt was fetched first, host parked...);
-- ARGV[4] te (next earliest contact, epoch s), ARGV[5] the head entry the worker fetched,
-- ARGV[8] hand-off deadline (0: none), ARGV[9] the calling fetch process. With a hand-off
-- deadline, a 'done' head URL is not dropped but parked in the hand-off zset until then
-- (still counted as queued), under the caller's name: its page is on its way to parse,
-- and ack.lua drops it once handed on; if the worker dies first, handoff.lua puts it
-- back at the head of its host's queue (at once when the process is known lost:
-- orphan.lua), so no fetched URL is lost.
-- ARGV[7] hold deadline (0: give the host back). With a hold deadline and URLs left, the
-- host stays leased to the caller until that deadline (a fetch session paces it at te
-- itself; should the session die, expire.lua returns the host after the deadline, which
-- the caller sets past te, so the delay still holds).
-- Otherwise the host re-enters the ready heap at te if its back queue still has URLs,
-- else it leaves the active set and its te is remembered in the te hash; either way it
-- has no lease owner any more.
-- Returns {1} (given back), {2, next head entry, new token} (held), {3} (given back: the
-- hold would pass the page budget), or {-1} when the lease is no longer ours (expired and
-- re-leased): nothing changed.
-- The same call sent again (redis-py does, when a Redis restart or a dropped connection
-- lost the reply) finds its own first run's work done: the host leased until this call's
-- hold deadline, or its fetched entry parked under the caller's name. It answers as the
-- first run did (held, or given back), so that the caller hands the page on with its
-- entry, which would otherwise stay parked and be fetched (and recorded) again; nor does
-- it count the page again.
local active, ready, lease, te_hash, queue, queued = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local host, token, action = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local te = tonumber(ARGV[4])
local hold = tonumber(ARGV[7] or '0')
local handoff = tonumber(ARGV[8] or '0')
local budget = tonumber(ARGV[10] or '0')
local count = ARGV[12] == '1'
local first_budget_key = 10
if #ARGV >= 14 then
  redis.call('HSET', KEYS[10], unpack(ARGV, 13, #ARGV))
  first_budget_key = 11
end
local score = redis.call('ZSCORE', lease, host)
local ours = score and math.abs(tonumber(score) - token) <= 0.001
if not ours then   -- this call sent again finds its first run's work (which counted the page)
  if hold > 0 and score and tonumber(score) == hold then
    local head = redis.call('LINDEX', queue, 0)
    if head then
      return {2, head, tostring(hold)}
    end
  end
  if handoff > 0 and action == 'done' and redis.call('HGET', KEYS[8], ARGV[5]) == ARGV[9] then
    return {1}
  end
end
if count then   -- a lease that ran out during the turn counts too: its page is still recorded
  redis.call('HINCRBY', KEYS[first_budget_key], ARGV[11], 1)
end
if not ours then
  return {-1}
end
if action ~= 'keep' and redis.call('LINDEX', queue, 0) == ARGV[5] then
  redis.call('LPOP', queue)
  if action == 'retry' then
    redis.call('RPUSH', queue, ARGV[6])
  elseif handoff > 0 then
    redis.call('ZADD', KEYS[7], handoff, ARGV[5])
    redis.call('HSET', KEYS[8], ARGV[5], ARGV[9])
  else
    redis.call('DECR', queued)
  end
end
local head = redis.call('LINDEX', queue, 0)
local spent = false
if hold > 0 and head and budget > 0 then
  local owed = tonumber(redis.call('HGET', KEYS[first_budget_key], ARGV[11]) or '0')
  for i = first_budget_key + 1, #KEYS do
    owed = owed + redis.call('ZCARD', KEYS[i])
  end
  if owed > budget then
    hold, spent = 0, true
  end
end
if hold > 0 and head then
  redis.call('ZADD', lease, hold, host)
  return {2, head, tostring(hold)}
end
redis.call('ZREM', lease, host)
redis.call('HDEL', KEYS[9], host)
if head then
  redis.call('ZADD', ready, te, host)
else
  redis.call('SREM', active, host)
  redis.call('HSET', te_hash, host, te)
end
if spent then
  return {3}
end
return {1}
