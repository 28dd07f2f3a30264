-- groupclaim.lua: a parse or enqueue worker takes a page group's work: the group is its
-- node's until the next stage takes it or it is enqueued (end_batch).
-- KEYS[1] the group owner hash (group id -> node), KEYS[2] the set of page groups given up.
-- ARGV[1] group id, ARGV[2] the worker's node.
-- A group given up (its node was lost first, and its pages are fetched again:
-- groupdrop.lua) is not taken: its records would be written twice.
-- Returns 1 taken, 0 given up.
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
