-- Take the lock and draw the next fencing token in one atomic step, so that
-- no other holder can be granted the lock between the two.
-- KEYS[1] lock key; KEYS[2] the key's fencing counter (same hash tag).
-- ARGV[1] the owner's value; ARGV[2] the lease in milliseconds.
-- Returns the new token (1 or more), or 0 when the lock is held: a nil
-- reply would reach the client as an error, which go-redis then classifies
-- at a cost of a dozen allocations per lost attempt.
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	return redis.call("INCR", KEYS[2])
end
return 0
