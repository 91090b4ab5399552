-- Add to a value as the holder of a fencing token, and remember the token as
-- the highest seen, so an older holder's FencedSet cannot overwrite the sum.
-- KEYS[1] the data key; KEYS[2] its highest token seen (same hash tag).
-- ARGV[1] the delta; ARGV[2] the writer's token.
-- Returns 1 if added, 0 if the token is stale.
local token = tonumber(ARGV[2])
if token < tonumber(redis.call("GET", KEYS[2]) or "0") then
	return 0
end
redis.call("SET", KEYS[2], ARGV[2])
redis.call("INCRBY", KEYS[1], ARGV[1])
return 1
