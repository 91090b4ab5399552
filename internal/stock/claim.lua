-- A buyer's claim on a product, on a Redis Cluster: taken before the take,
-- since the buyer's key and the shards are in different slots and no one
-- script may touch both.
-- KEYS[1] buyer. ARGV[1] the claim ("claim <idempotency key>"); ARGV[2] its
-- time to live (ms).
-- Returns what the key held (a claim, or a take's record), or nil when the
-- claim is made.
local prior = redis.call("GET", KEYS[1])
if prior then
	return prior
end
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
return nil
