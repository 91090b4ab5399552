-- Write a value only for a holder whose fencing token is at least the
-- highest this key has seen, and remember the token: a holder whose lease
-- expired (and whose successor already wrote) is refused.
-- KEYS[1] the data key; KEYS[2] its highest token seen (same hash tag).
-- ARGV[1] the value; ARGV[2] the writer's token.
-- Returns 1 if written, 0 if the token is stale.
-- Lua numbers are doubles, exact up to 2^53: far beyond what INCR reaches.
local token = tonumber(ARGV[2])
if token < tonumber(redis.call("GET", KEYS[2]) or "0") then
	return 0
end
redis.call("SET", KEYS[2], ARGV[2])
redis.call("SET", KEYS[1], ARGV[1])
return 1
