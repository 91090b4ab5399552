-- The read of a fenced read-modify-write: read the shard as the holder of a
-- fencing token, and remember the token as the highest seen, so that every
-- older holder's write is refused from now on. If only writes were checked,
-- a newer holder could read, an older one write, and the newer one write its
-- stale result over it. A holder whose lock issues no token draws one here,
-- the next above every token seen (the read's order is the tokens' order).
-- KEYS[1] shard stock; KEYS[2] its fence. ARGV[1] the reader's token, or 0
-- to draw one.
-- Returns {1, value, token}, {-2} no stock key (not laid out), {-3} stale
-- token.
local v = redis.call("GET", KEYS[1])
if not v then
	return {-2}
end
local token = tonumber(ARGV[1])
if token == 0 then
	return {1, v, redis.call("INCR", KEYS[2])}
end
if token < tonumber(redis.call("GET", KEYS[2]) or "0") then
	return {-3}
end
redis.call("SET", KEYS[2], ARGV[1])
return {1, v, token}
