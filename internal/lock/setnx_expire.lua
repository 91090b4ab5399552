-- SETNX and PEXPIRE in one script, so that no crash can come between them.
-- KEYS[1] lock key; ARGV[1] TTL in milliseconds.
-- Returns 1 if the lock was taken, else 0.
if redis.call("SETNX", KEYS[1], 1) == 1 then
	redis.call("PEXPIRE", KEYS[1], ARGV[1])
	return 1
end
return 0
