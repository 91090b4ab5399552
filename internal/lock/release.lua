-- Compare-and-delete: remove the lock only if it still holds this owner's
-- value, so a holder whose lease expired cannot delete its successor's lock.
-- KEYS[1] lock key; ARGV[1] the owner's value; ARGV[2], optional, the suffix
-- that makes KEYS[1] the channel to PUBLISH the release on, so that waiters
-- wake at once (the client names the channel once for all keys, instead of
-- building each key's name for every release). The notice carries the
-- value, dead once deleted, so that the releasing client can tell its own
-- notices from other clients'.
-- Returns 1 if deleted, else 0.
if redis.call("GET", KEYS[1]) == ARGV[1] then
	redis.call("DEL", KEYS[1])
	if ARGV[2] then
		redis.call("PUBLISH", KEYS[1] .. ARGV[2], ARGV[1])
	end
	return 1
end
return 0
