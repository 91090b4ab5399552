-- Schedule payment deadlines on a shard's deadline set (see deadlines.go).
-- On one Redis: KEYS[1] the set; KEYS[2] the registry the pollers read,
-- which the set joins here, in the same step. On a Redis Cluster, every key
-- in the shard's slot: KEYS[1] the set; KEYS[2] its marker, which says it
-- is open (an empty sorted set is no key, so the set cannot say it itself)
-- and holds when it last took a deadline (ms); KEYS[3] its generation. The
-- registry is in a slot of its own: the set is enrolled there before it
-- opens (registry.go).
-- ARGV[1] on a cluster the generation the caller enrolled the set at, ""
-- when it expects the set open; then pairs of score (ms) and order id.
-- Returns {1}, or on a cluster {-4, generation}: the set is closed, enrol
-- it at that generation and schedule again with it.
local cluster = #KEYS == 3
if cluster and redis.call("EXISTS", KEYS[2]) == 0 then
	local gen = redis.call("GET", KEYS[3]) or "0"
	if ARGV[1] ~= gen then
		return {-4, gen}
	end
end
for i = 2, #ARGV, 2 do
	redis.call("ZADD", KEYS[1], ARGV[i], ARGV[i + 1])
end
if cluster then
	local t = redis.call("TIME")
	redis.call("SET", KEYS[2], t[1] .. string.format("%03d", math.floor(tonumber(t[2]) / 1000)))
else
	redis.call("HSET", KEYS[2], KEYS[1], "0")
end
return {1}
