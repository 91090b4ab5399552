-- Delete a shard's lock if it has no expiry: one that a holder abandoned
-- (setnx's, or setnx-expire's before its EXPIRE) and that nothing else
-- would ever remove. A lock with a lease is left to its lease.
-- KEYS[1] the lock. Returns 1 deleted, 0 not.
if redis.call("PTTL", KEYS[1]) == -1 then
	return redis.call("DEL", KEYS[1])
end
return 0
