-- Compare-and-delete: remove the lock only if it still holds this owner's
-- value, so a holder whose lease expired cannot delete its successor's lock.
-- KEYS[1] lock key; ARGV[1] the owner's value. Returns 1 if deleted, else 0.
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
return 0
