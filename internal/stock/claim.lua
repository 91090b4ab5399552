-- A buyer's claim on a product, on a Redis Cluster: taken before the take,
-- since the buyer's key and the shards are in different slots and no one
-- script may touch both. The claim has no expiry: once its purchase took,
-- it is the buyer's record of the take (claim.go); one whose purchase died
-- is forgotten by the buyer's next purchase, after the claim window.
-- KEYS[1] buyer. ARGV[1] the claim ("claim <idempotency key> <millis>
-- <order>").
-- Returns what the key held (a claim, or a take's record), or nil when the
-- claim is made.
local prior = redis.call("GET", KEYS[1])
if prior then
	return prior
end
redis.call("SET", KEYS[1], ARGV[1])
return nil
