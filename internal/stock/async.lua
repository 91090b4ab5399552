-- The async mode: everything the lua mode does, and in the same atomic step
-- draw the order id and queue the order on the shard's stream, which is the
-- outbox: there is no moment when the unit is taken and the order not
-- recorded somewhere durable (as durable as Redis is: see the
-- async-durability scenario).
-- KEYS[1] shard stock; KEYS[2] shard ledger; KEYS[3] shard stream; KEYS[4]
-- buyer; KEYS[5] the order id's day key (idgen's hash of "seq" and
-- "ceil"); KEYS[6] the day's pending index;
-- KEYS[7] the registry of streams the consumers read. On a Redis Cluster
-- only the shard's KEYS[1..3] are given: the id is drawn before (ARGV[12]),
-- the stream registered before and the pending index written after, each a
-- step of its own (see take.go), and the buyer's claim stands for KEYS[4].
-- ARGV[1] user id; ARGV[2] idempotency key; ARGV[3] shard; ARGV[4] millis;
-- ARGV[5] seconds since the id epoch; ARGV[6] the pending index's TTL (ms);
-- ARGV[7] product id; ARGV[8] sale; ARGV[9] the consumers' group; ARGV[10]
-- when the payment window ends (ms), 0 for none; ARGV[11] the key the
-- queued message carries: ARGV[2], or the lab's poison (one its row's
-- column refuses); ARGV[12] the order id, on a cluster.
-- Returns {1, order id, seq, ceil} (seq and ceil of the id's block, 0 on a
-- cluster), or the lua mode's {0}, {-1, record}, {-2}, or {-4, seq} when
-- the order id's day has no block of numbers left.
local prior
if KEYS[4] then
	prior = redis.call("GET", KEYS[4])
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
local id = ARGV[12]
local drawn = {0, 0}
if KEYS[5] then
	-- The id's sequence number, as idgen's next.lua draws it: only within
	-- the block reserved for the day, else {-4, seq} and the caller
	-- reserves one (idgen.Redis.Refill) before it runs this again.
	local v = redis.call("HMGET", KEYS[5], "seq", "ceil")
	local seq = tonumber(v[1]) or 0
	local ceil = tonumber(v[2])
	if not ceil or seq >= ceil then
		return {-4, seq}
	end
	seq = redis.call("HINCRBY", KEYS[5], "seq", 1)
	drawn = {seq, ceil}
	-- The id is seconds << 32 | seq, written out exactly: a Lua number
	-- holds integers only up to 2^53. With 2^32 = 4294 * 10^6 + 967296,
	-- both parts below stay under 2^53.
	local secs = tonumber(ARGV[5])
	local hi = secs * 4294
	local lo = secs * 967296 + seq
	hi = hi + math.floor(lo / 1000000)
	lo = lo % 1000000
	if hi > 0 then
		id = string.format("%d%06d", hi, lo)
	else
		id = string.format("%d", lo)
	end
end
local rec = id .. " " .. ARGV[2] .. " " .. ARGV[3] .. " " .. ARGV[4]
redis.call("DECR", KEYS[1])
redis.call("HSET", KEYS[2], ARGV[1], rec)
if KEYS[4] then
	redis.call("SET", KEYS[4], rec)
end
if redis.call("EXISTS", KEYS[3]) == 0 then
	redis.call("XGROUP", "CREATE", KEYS[3], ARGV[9], "0", "MKSTREAM")
end
redis.call("XADD", KEYS[3], "*", "id", id, "product", ARGV[7], "sale", ARGV[8], "user", ARGV[1],
	"shard", ARGV[3], "key", ARGV[11], "at", ARGV[4], "due", ARGV[10])
if KEYS[6] then
	redis.call("HSET", KEYS[6], id, ARGV[7] .. " " .. ARGV[3] .. " " .. ARGV[1] .. " " .. ARGV[8])
	if redis.call("PTTL", KEYS[6]) < 0 then
		redis.call("PEXPIRE", KEYS[6], ARGV[6])
	end
	redis.call("SADD", KEYS[7], KEYS[3])
end
return {1, id, drawn[1], drawn[2]}
