-- Ends the retries of a purchase that redeemed a path token: its order was
-- cancelled, so a retry with its idempotency key is another purchase and
-- must not redeem the token again. One round trip, atomic.
-- KEYS[1]  the buyer's path key for the product (seckill:path:<product>:<buyer>)
-- ARGV[1]  the purchase's idempotency key
-- The token redeem.lua marked 'used:<key>:<token>' becomes 'used::<token>',
-- which redeems for no key; any other value (a newer token, none) stays.
local v = redis.call('GET', KEYS[1])
if not v then
	return 0
end
local head = 'used:' .. ARGV[1] .. ':'
if string.sub(v, 1, #head) ~= head then
	return 0
end
redis.call('SET', KEYS[1], 'used::' .. string.sub(v, #head + 1), 'KEEPTTL')
return 1
