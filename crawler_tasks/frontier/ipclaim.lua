-- ipclaim.lua: per-IP politeness (optional): several hosts on one address share one gap.
-- KEYS[1] hash address -> earliest next contact (or the end of a claim in progress).
-- ARGV[1] address, ARGV[2] now, ARGV[3] claim deadline (now + lease).
-- Returns 0 when the caller may contact the address now (it is claimed until ARGV[3];
-- the caller then writes the real next contact), else the time it becomes free.
local t = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or 0)
if t > tonumber(ARGV[2]) then
  return tostring(t)
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 0
