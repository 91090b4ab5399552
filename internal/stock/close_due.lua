-- Close a deadline set that holds no deadline, so that the pollers no
-- longer read it; when ARGV[1] is not 0, only one that took no deadline
-- for ARGV[1] milliseconds, so that a set emptied between two orders of a
-- running sale stays open.
-- On one Redis: KEYS[1] the set; KEYS[2] the registry. The set leaves the
-- registry here; the next schedule enrols it again in its own script.
-- On a Redis Cluster: KEYS[1] the set; KEYS[2] its marker; KEYS[3] its
-- generation. The registry is in another slot: the caller drops the set
-- from it at the generation returned (unenrol.lua), and a schedule finding
-- the set closed enrols it at that generation before opening it
-- (schedule.lua, registry.go).
-- ARGV[1] the idle time in ms, 0 for none.
-- Returns 0 kept; else 1 on one Redis, the new generation on a cluster.
if redis.call("ZCARD", KEYS[1]) > 0 then
	return 0
end
if #KEYS == 2 then
	redis.call("HDEL", KEYS[2], KEYS[1])
	return 1
end
local idle = tonumber(ARGV[1])
local last = redis.call("GET", KEYS[2])
if idle > 0 and last then
	local t = redis.call("TIME")
	local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
	if now - tonumber(last) < idle then
		return 0
	end
end
redis.call("DEL", KEYS[2])
return redis.call("INCR", KEYS[3])
