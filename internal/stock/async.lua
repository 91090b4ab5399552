-- The async mode: everything the lua mode does, and in the same atomic step
-- queue the order on the shard's stream, which is the outbox: there is no
-- moment when the unit is taken and the order not recorded somewhere
-- durable (as durable as Redis is: see the async-durability scenario).
-- The order id is drawn before (idgen), so that a take whose reply is lost
-- still names its order, and a retry passes the same id.
-- KEYS[1] shard stock; KEYS[2] shard ledger; KEYS[3] shard stream; KEYS[4]
-- the pending index. On one Redis, KEYS[4] is the day's and KEYS[5] the
-- buyer, KEYS[6] the registry of streams the consumers read. On a Redis
-- Cluster, every key is in the shard's slot: KEYS[4] is the shard's pending
-- index and KEYS[5] the stream's generation; the buyer's claim, in the
-- buyer's slot, stands for the buyer (claim.go), and the registry, in a slot
-- of its own, is enrolled in before the stream opens (registry.go).
-- ARGV[1] user id; ARGV[2] idempotency key; ARGV[3] shard; ARGV[4] millis;
-- ARGV[5] the order id; ARGV[6] the day's pending index's TTL (ms);
-- ARGV[7] product id; ARGV[8] sale; ARGV[9] the consumers' group; ARGV[10]
-- when the payment window ends (ms), 0 for none; ARGV[11] the key the
-- queued message carries: ARGV[2], or the lab's poison (one its row's
-- column refuses); ARGV[12] the purchase's trace context (a W3C
-- traceparent), carried as the entry's field "trace" to the consumer, ""
-- for none; ARGV[13], on a cluster, the generation the caller enrolled the
-- stream at, "" when it expects the stream open.
-- Returns {1}, or the lua mode's {0}, {-1, record}, {-2}, or on a cluster
-- {-4, generation}: the stream is closed, enrol it at that generation and
-- take again with it.
local cluster = #KEYS == 5
local prior
if cluster then
	prior = redis.call("HGET", KEYS[2], ARGV[1])
else
	prior = redis.call("GET", KEYS[5])
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
if redis.call("EXISTS", KEYS[3]) == 0 then
	if cluster then
		local gen = redis.call("GET", KEYS[5]) or "0"
		if ARGV[13] ~= gen then
			return {-4, gen}
		end
	end
	redis.call("XGROUP", "CREATE", KEYS[3], ARGV[9], "0", "MKSTREAM")
end
local id = ARGV[5]
local rec = id .. " " .. ARGV[2] .. " " .. ARGV[3] .. " " .. ARGV[4]
redis.call("DECR", KEYS[1])
redis.call("HSET", KEYS[2], ARGV[1], rec)
local entry = {"id", id, "product", ARGV[7], "sale", ARGV[8], "user", ARGV[1],
	"shard", ARGV[3], "key", ARGV[11], "at", ARGV[4], "due", ARGV[10]}
if ARGV[12] ~= "" then
	entry[#entry + 1] = "trace"
	entry[#entry + 1] = ARGV[12]
end
redis.call("XADD", KEYS[3], "*", unpack(entry))
redis.call("HSET", KEYS[4], id, ARGV[7] .. " " .. ARGV[3] .. " " .. ARGV[1] .. " " .. ARGV[8])
if not cluster then
	redis.call("SET", KEYS[5], rec)
	if redis.call("PTTL", KEYS[4]) < 0 then
		redis.call("PEXPIRE", KEYS[4], ARGV[6])
	end
	redis.call("HSET", KEYS[6], KEYS[3], "0")
end
return {1}
