-- The write of a read-modify-write: set the shard to the value the holder
-- computed from its read, and record the take, in one atomic step. The value
-- is absolute, not a decrement: two holders that read the same stock both
-- write the same value and one sale is lost. Only the lock (or, with a token,
-- the fence) stands between that and an oversell; that is the lesson.
-- KEYS[1] shard stock; KEYS[2] its fence; KEYS[3] shard ledger; KEYS[4] buyer,
-- absent on a Redis Cluster (see take.lua).
-- ARGV[1] the new value; ARGV[2] the fencing token, 0 for none; ARGV[3] user
-- id; ARGV[4] the take's record.
-- Returns {1} written, {-1, record} the buyer took a unit already, {-2} no
-- stock key, {-3} stale token (a newer holder has been at the shard).
local token = tonumber(ARGV[2])
if token > 0 and token < tonumber(redis.call("GET", KEYS[2]) or "0") then
	return {-3}
end
local prior
if KEYS[4] then
	prior = redis.call("GET", KEYS[4])
else
	prior = redis.call("HGET", KEYS[3], ARGV[3])
end
if prior then
	return {-1, prior}
end
if redis.call("EXISTS", KEYS[1]) == 0 then
	return {-2}
end
if token > 0 then
	redis.call("SET", KEYS[2], ARGV[2])
end
redis.call("SET", KEYS[1], ARGV[1])
redis.call("HSET", KEYS[3], ARGV[3], ARGV[4])
if KEYS[4] then
	redis.call("SET", KEYS[4], ARGV[4])
end
return {1}
