-- Delete a buyer's key if it still holds this purchase's claim (ARGV[1]),
-- or the record, or the claim, of the take whose order id is ARGV[2]: never
-- another purchase's.
-- KEYS[1] buyer. Returns 1 deleted, 0 not.
local v = redis.call("GET", KEYS[1])
if not v then
	return 0
end
local order = string.match(v, "^claim %S+ %S+ (%S+)$") or string.match(v, "^%S+")
if v == ARGV[1] or order == ARGV[2] then
	return redis.call("DEL", KEYS[1])
end
return 0
