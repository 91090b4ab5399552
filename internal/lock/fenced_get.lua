-- Read a value as the holder of a fencing token, and remember the token as
-- the highest seen: from then on every older holder's FencedSet is refused.
-- A fenced read-modify-write needs this: if only the write were checked, a
-- newer holder could read, an older one write, and the newer write its
-- stale result over it, losing the older update.
-- KEYS[1] the data key; KEYS[2] its highest token seen (same hash tag).
-- ARGV[1] the reader's token.
-- Returns {1, value} (value false when the key is absent), or {0} if stale.
local token = tonumber(ARGV[1])
if token < tonumber(redis.call("GET", KEYS[2]) or "0") then
	return {0}
end
redis.call("SET", KEYS[2], ARGV[1])
return {1, redis.call("GET", KEYS[1])}
