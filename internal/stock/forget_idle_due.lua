-- Drop an empty deadline set from the registry the pollers read; the next
-- order scheduled on its shard registers it again.
-- KEYS[1] the deadline set; KEYS[2] the registry. Returns 1 dropped, 0 kept.
if redis.call("ZCARD", KEYS[1]) > 0 then
	return 0
end
redis.call("SREM", KEYS[2], KEYS[1])
return 1
