-- Compensation: put one unit back on its shard and forget the buyer, so a
-- failed order write leaves the stock as it was.
-- KEYS[1] shard stock key; KEYS[2] the product's buyer set. ARGV[1] user id.
redis.call("INCR", KEYS[1])
redis.call("SREM", KEYS[2], ARGV[1])
return 1
