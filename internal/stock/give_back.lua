-- Put a taken unit back on its shard and forget the take, if the ledger
-- still holds it: a give-back that runs twice (a retry, the purchase and
-- the reconciler both) returns the unit once.
-- KEYS[1] shard stock; KEYS[2] its fence; KEYS[3] shard ledger; KEYS[4] buyer,
-- absent on a Redis Cluster (the caller forgets the buyer's claim after).
-- ARGV[1] user id; ARGV[2] order id; ARGV[3] fencing token, 0 for none;
-- ARGV[4] "1" to draw a token (INCR the fence) with the unit, so that a
-- holder that drew its token at its read before the give-back cannot write
-- its stale value over the unit (see fenced_read.lua).
-- Returns 1 given back, 0 nothing to give back, -3 stale token.
local token = tonumber(ARGV[3])
if token > 0 and token < tonumber(redis.call("GET", KEYS[2]) or "0") then
	return -3
end
local rec = redis.call("HGET", KEYS[3], ARGV[1])
if not rec or string.match(rec, "^%S+") ~= ARGV[2] then
	return 0
end
if token > 0 then
	redis.call("SET", KEYS[2], ARGV[3])
elseif ARGV[4] == "1" then
	redis.call("INCR", KEYS[2])
end
redis.call("HDEL", KEYS[3], ARGV[1])
if redis.call("EXISTS", KEYS[1]) == 1 then
	redis.call("INCR", KEYS[1])
end
local b = KEYS[4] and redis.call("GET", KEYS[4])
if b and string.match(b, "^%S+") == ARGV[2] then
	redis.call("DEL", KEYS[4])
end
return 1
