-- Close a drained order stream: drop it, so that the consumers no longer
-- read it. Only a stream that holds no order is closed (an order leaves its
-- stream when it is acknowledged, never before, so an empty stream has
-- none delivered and unacknowledged either), and, when ARGV[1] is not 0,
-- only one that took no order for ARGV[1] milliseconds: a stream that
-- empties between two orders of a running sale stays open.
-- On one Redis: KEYS[1] the stream; KEYS[2] the registry. The stream leaves
-- the registry here; the next take enrols it again in its own script.
-- On a Redis Cluster: KEYS[1] the stream; KEYS[2] the shard's pending
-- index; KEYS[3] the stream's generation. The registry is in another slot:
-- the caller drops the stream from it at the generation returned
-- (unenrol.lua), and a take finding the stream closed enrols it at that
-- generation before opening it (async.lua, registry.go).
-- ARGV[1] the idle time in ms, 0 for none.
-- Returns 0 kept; else 1 on one Redis, the new generation on a cluster.
if redis.call("EXISTS", KEYS[1]) == 1 then
	if redis.call("XLEN", KEYS[1]) > 0 then
		return 0
	end
	local idle = tonumber(ARGV[1])
	if idle > 0 then
		local info = redis.call("XINFO", "STREAM", KEYS[1])
		local last
		for i = 1, #info, 2 do
			if info[i] == "last-generated-id" then
				last = tonumber(string.match(info[i + 1], "^%d+"))
			end
		end
		local t = redis.call("TIME")
		local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
		if last and now - last < idle then
			return 0
		end
	end
	redis.call("DEL", KEYS[1])
end
if #KEYS == 2 then
	redis.call("HDEL", KEYS[2], KEYS[1])
	return 1
end
-- The pending index holds only orders written already: their entries left
-- the stream when they were acknowledged after the write.
redis.call("DEL", KEYS[2])
return redis.call("INCR", KEYS[3])
