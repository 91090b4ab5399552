-- Redeems a buyer's purchase path token: one round trip, atomic.
-- KEYS[1]  the buyer's path key for the product (seckill:path:<product>:<buyer>)
-- ARGV[1]  the token presented
-- ARGV[2]  the purchase's idempotency key, or "" without one
-- Returns 1 (redeemed now, or by this same purchase before: a retry),
-- 2 (used by another purchase), 0 (none: never issued, expired, replaced
-- by a newer one, or another buyer's or product's).
local v = redis.call('GET', KEYS[1])
if not v then
	return 0
end
if v == ARGV[1] then
	redis.call('SET', KEYS[1], 'used:' .. ARGV[2] .. ':' .. ARGV[1], 'KEEPTTL')
	return 1
end
if ARGV[2] ~= '' and v == 'used:' .. ARGV[2] .. ':' .. ARGV[1] then
	return 1
end
local tail = ':' .. ARGV[1]
if string.sub(v, 1, 5) == 'used:' and string.sub(v, -#tail) == tail then
	return 2
end
return 0
