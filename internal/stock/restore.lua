-- Take back the unit of an order whose take the shard forgot (a Redis back
-- from a persistence file that lost its last writes, a replica promoted
-- without its master's last takes): record the take again and take its
-- unit out of the stock, in one atomic step, once.
-- KEYS[1] shard stock; KEYS[2] its fence; KEYS[3] shard ledger; KEYS[4] the
-- shard's repair counts; KEYS[5] buyer, absent on a Redis Cluster (the
-- caller settles the buyer's key after).
-- ARGV[1] user id; ARGV[2] the take's record; ARGV[3] fencing token, 0 for
-- none; ARGV[4] "1" to draw a token (INCR the fence) with the change, as a
-- guarded give-back does (see give_back.lua).
-- Returns 1 restored, 2 recorded without its unit (the stock was 0: the
-- unit was sold again, an oversell the audit shows), 0 the ledger holds the
-- take already, 3 the ledger holds another take of the buyer (left: the
-- reconciler returns that one if it never became an order), -2 no stock
-- key, -3 stale token.
local token = tonumber(ARGV[3])
if token > 0 and token < tonumber(redis.call("GET", KEYS[2]) or "0") then
	return -3
end
local rec = redis.call("HGET", KEYS[3], ARGV[1])
if rec == ARGV[2] then
	return 0
end
if rec then
	return 3
end
local n = redis.call("GET", KEYS[1])
if not n then
	return -2
end
if token > 0 then
	redis.call("SET", KEYS[2], ARGV[3])
elseif ARGV[4] == "1" then
	redis.call("INCR", KEYS[2])
end
redis.call("HSET", KEYS[3], ARGV[1], ARGV[2])
if KEYS[5] then
	redis.call("SET", KEYS[5], ARGV[2], "NX")
end
if tonumber(n) > 0 then
	redis.call("DECR", KEYS[1])
	redis.call("HINCRBY", KEYS[4], "restored", 1)
	return 1
end
redis.call("HINCRBY", KEYS[4], "short", 1)
return 2
