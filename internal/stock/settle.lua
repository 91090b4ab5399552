-- Turn a buyer's claim into the record of the take it made, for good.
-- KEYS[1] buyer. ARGV[1] the claim; ARGV[2] the take's record.
-- Returns 1 settled (also when the claim had expired and nobody claimed
-- since), 0 when another purchase of the buyer holds the key.
local v = redis.call("GET", KEYS[1])
if v and v ~= ARGV[1] and v ~= ARGV[2] then
	return 0
end
redis.call("SET", KEYS[1], ARGV[2])
return 1
