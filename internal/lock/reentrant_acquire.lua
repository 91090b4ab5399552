-- Reentrant acquire (Redisson's design): the lock is a hash whose one field
-- is the owner and whose value counts that owner's holds. A free lock, or
-- one this owner already holds, gains a hold and a fresh TTL.
-- KEYS[1] lock key; ARGV[1] owner; ARGV[2] TTL in milliseconds.
-- Returns the owner's hold count if obtained, else 0.
if redis.call("EXISTS", KEYS[1]) == 0 or redis.call("HEXISTS", KEYS[1], ARGV[1]) == 1 then
	local holds = redis.call("HINCRBY", KEYS[1], ARGV[1], 1)
	redis.call("PEXPIRE", KEYS[1], ARGV[2])
	return holds
end
return 0
