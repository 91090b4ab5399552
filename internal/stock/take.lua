-- The lock-free path: check the shard's stock and the buyer, decrement and
-- record the buyer, all in one atomic step.
-- KEYS[1] shard stock key; KEYS[2] the product's buyer set. ARGV[1] user id.
-- Returns 1 taken, 0 shard empty, -1 this user already bought.
if redis.call("SISMEMBER", KEYS[2], ARGV[1]) == 1 then
	return -1
end
local n = tonumber(redis.call("GET", KEYS[1]) or "0")
if n <= 0 then
	return 0
end
redis.call("DECR", KEYS[1])
redis.call("SADD", KEYS[2], ARGV[1])
return 1
