-- The next sequence number of a day, drawn only within the block reserved
-- for it in the durable store (blocks.go): a Redis that lost its keys, or
-- came back from a snapshot older than its last draws, cannot issue again a
-- number it issued before, because no number past the reserved ceiling is
-- issued until a new block, past every one reserved, is set (refill.lua).
-- KEYS[1] the day key, a hash: "seq" the last number issued, "ceil" the
-- last number of the block reserved.
-- Returns {1, seq, ceil} for the new number, or {0, seq} when the day has no
-- block left (none set, or used up): the caller reserves one past seq.
local v = redis.call("HMGET", KEYS[1], "seq", "ceil")
local seq = tonumber(v[1]) or 0
local ceil = tonumber(v[2])
if not ceil or seq >= ceil then
	return {0, seq}
end
return {1, redis.call("HINCRBY", KEYS[1], "seq", 1), ceil}
