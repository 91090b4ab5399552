-- The write of a read-modify-write: set the shard to the value the holder
-- computed from its read, and record the take, in one atomic step. The value
-- is absolute, not a decrement: two holders that read the same stock both
-- write the same value and one sale is lost. Only the lock (or, with a token,
-- the fence) stands between that and an oversell; that is the lesson. A
-- product sold to the public also has the write check that the lock still
-- names this holder, so that a holder paused past its lease writes nothing.
-- KEYS[1] shard stock; KEYS[2] its fence; KEYS[3] shard ledger; KEYS[4] the
-- shard's lock; KEYS[5] buyer, absent on a Redis Cluster (see take.lua).
-- ARGV[1] the new value; ARGV[2] the fencing token, 0 for none; ARGV[3] user
-- id; ARGV[4] the take's record; ARGV[5] the value the lock must hold, or
-- ARGV[6] the hash field it must have ("" for no check).
-- Returns {1} written, {-1, record} the buyer took a unit already, {-2} no
-- stock key, {-3} stale token (a newer holder has been at the shard), {-5}
-- the lock no longer names this holder.
local token = tonumber(ARGV[2])
if token > 0 and token < tonumber(redis.call("GET", KEYS[2]) or "0") then
	return {-3}
end
-- pcall: a lock key of another type (another strategy's) is not this
-- holder's either.
if ARGV[5] ~= "" and redis.pcall("GET", KEYS[4]) ~= ARGV[5] then
	return {-5}
end
if ARGV[6] ~= "" and redis.pcall("HEXISTS", KEYS[4], ARGV[6]) ~= 1 then
	return {-5}
end
local prior
if KEYS[5] then
	prior = redis.call("GET", KEYS[5])
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
if KEYS[5] then
	redis.call("SET", KEYS[5], ARGV[4])
end
return {1}
