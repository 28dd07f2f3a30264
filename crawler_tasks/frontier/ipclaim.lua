-- ipclaim.lua: per-address politeness: the host names on one address share one gap.
-- KEYS[1] hash address -> earliest next contact, or minus the deadline of a claim in progress.
-- ARGV[1] address, ARGV[2] now, ARGV[3] claim deadline (now + lease).
-- Returns {0} when the caller may contact the address now (it is claimed until ARGV[3];
-- the caller then writes the real next contact), {t} when the address rests until t, or
-- {-d} while another host's claim is in progress (until d at the latest).
local t = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or 0)
local now = tonumber(ARGV[2])
if t > now or -t > now then
  return {tostring(t)}
end
redis.call('HSET', KEYS[1], ARGV[1], '-' .. ARGV[3])
return {0}
