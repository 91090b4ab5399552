-- Drop a stream the consumers no longer need to read: only if it holds no
-- order (an order leaves the stream when it is acknowledged, never before,
-- so an empty stream has none delivered and unacknowledged either). The
-- next async take on its shard creates it again and registers it.
-- KEYS[1] the stream; KEYS[2] the registry.
-- Returns 1 dropped, 0 kept.
if redis.call("XLEN", KEYS[1]) > 0 then
	return 0
end
redis.call("DEL", KEYS[1])
redis.call("SREM", KEYS[2], KEYS[1])
return 1
