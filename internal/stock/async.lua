-- The async mode: everything the lua mode does, and in the same atomic step
-- queue the order on the shard's stream, which is the outbox: there is no
-- moment when the unit is taken and the order not recorded somewhere
-- durable (as durable as Redis is: see the async-durability scenario).
-- The order id is drawn before (idgen), so that a take whose reply is lost
-- still names its order, and a retry passes the same id.
-- KEYS[1] shard stock; KEYS[2] shard ledger; KEYS[3] shard stream; KEYS[4]
-- buyer; KEYS[5] the day's pending index; KEYS[6] the registry of streams
-- the consumers read. On a Redis Cluster only the shard's KEYS[1..3] are
-- given: the stream is registered before and the pending index written
-- after, each a step of its own (see take.go), and the buyer's claim
-- stands for KEYS[4].
-- ARGV[1] user id; ARGV[2] idempotency key; ARGV[3] shard; ARGV[4] millis;
-- ARGV[5] the order id; ARGV[6] the pending index's TTL (ms); ARGV[7]
-- product id; ARGV[8] sale; ARGV[9] the consumers' group; ARGV[10] when
-- the payment window ends (ms), 0 for none; ARGV[11] the key the queued
-- message carries: ARGV[2], or the lab's poison (one its row's column
-- refuses); ARGV[12] the purchase's trace context (a W3C traceparent),
-- carried as the entry's field "trace" to the consumer, "" for none.
-- Returns {1}, or the lua mode's {0}, {-1, record}, {-2}.
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
local id = ARGV[5]
local rec = id .. " " .. ARGV[2] .. " " .. ARGV[3] .. " " .. ARGV[4]
redis.call("DECR", KEYS[1])
redis.call("HSET", KEYS[2], ARGV[1], rec)
if KEYS[4] then
	redis.call("SET", KEYS[4], rec)
end
if redis.call("EXISTS", KEYS[3]) == 0 then
	redis.call("XGROUP", "CREATE", KEYS[3], ARGV[9], "0", "MKSTREAM")
end
local entry = {"id", id, "product", ARGV[7], "sale", ARGV[8], "user", ARGV[1],
	"shard", ARGV[3], "key", ARGV[11], "at", ARGV[4], "due", ARGV[10]}
if ARGV[12] ~= "" then
	entry[#entry + 1] = "trace"
	entry[#entry + 1] = ARGV[12]
end
redis.call("XADD", KEYS[3], "*", unpack(entry))
if KEYS[5] then
	redis.call("HSET", KEYS[5], id, ARGV[7] .. " " .. ARGV[3] .. " " .. ARGV[1] .. " " .. ARGV[8])
	if redis.call("PTTL", KEYS[5]) < 0 then
		redis.call("PEXPIRE", KEYS[5], ARGV[6])
	end
	redis.call("SADD", KEYS[6], KEYS[3])
end
return {1}
