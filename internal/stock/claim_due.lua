-- Claim the orders whose payment window has ended: the due members of a
-- shard's deadline set, each moved a lease into the future in the same
-- step, so that no other process claims it meanwhile and, if the claimer
-- dies before it is done (ZREM), another claims it when the lease ends.
-- KEYS[1] the deadline set. ARGV[1] now (ms); ARGV[2] the lease (ms);
-- ARGV[3] the most to claim. Returns the claimed order ids.
local due = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1], "LIMIT", 0, tonumber(ARGV[3]))
local later = tonumber(ARGV[1]) + tonumber(ARGV[2])
for _, id in ipairs(due) do
	redis.call("ZADD", KEYS[1], later, id)
end
return due
