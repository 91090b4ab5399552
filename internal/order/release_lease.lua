-- Release a lease only if it still holds the holder's token: a holder whose
-- lease expired must not delete its successor's.
-- KEYS[1] the lease; ARGV[1] the holder's token. Returns 1 deleted, else 0.
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
return 0
