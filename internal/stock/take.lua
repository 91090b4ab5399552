-- The lua mode: check the buyer and the shard, decrement, and record the
-- take in the shard's ledger and under the buyer, in one atomic step.
-- KEYS[1] shard stock; KEYS[2] shard ledger; KEYS[3] buyer, absent on a
-- Redis Cluster, where the buyer's claim stands for it (claim.go) and the
-- ledger answers for a retry on this shard.
-- ARGV[1] user id; ARGV[2] the take's record ("order key shard millis").
-- Returns {1} taken, {0} shard empty, {-1, record} the buyer took a unit
-- already (the record of that take: a retry of the same purchase finds its
-- own), {-2} the shard's stock key does not exist (not laid out, or lost).
local prior
if KEYS[3] then
	prior = redis.call("GET", KEYS[3])
else
	prior = redis.call("HGET", KEYS[2], ARGV[1])
end
if prior then
	return {-1, prior}
end
local n = redis.call("GET", KEYS[1])
if not n then
	return {-2}
end
if tonumber(n) <= 0 then
	return {0}
end
redis.call("DECR", KEYS[1])
redis.call("HSET", KEYS[2], ARGV[1], ARGV[2])
if KEYS[3] then
	redis.call("SET", KEYS[3], ARGV[2])
end
return {1}
