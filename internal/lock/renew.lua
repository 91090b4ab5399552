-- Renew: give the lock a fresh TTL only if it still holds this owner's
-- value, so a holder cannot extend a lock that has passed to someone else.
-- KEYS[1] lock key; ARGV[1] the owner's value; ARGV[2] TTL in milliseconds.
-- Returns 1 if renewed, else 0.
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
