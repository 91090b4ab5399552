-- Reentrant release: take one hold off the owner's count; the last hold
-- deletes the lock and announces it, so that waiters wake at once. A release
-- that leaves holds renews the TTL: the owner is still at work.
-- KEYS[1] lock key; ARGV[1] owner; ARGV[2] TTL in milliseconds; ARGV[3] the
-- suffix that makes KEYS[1] the channel to PUBLISH the release on. The
-- notice carries the owner, so that the releasing client can tell its own
-- notices from other clients'.
-- Returns the holds left, or -1 if the owner held no hold (the lock expired
-- or belongs to someone else).
if redis.call("HEXISTS", KEYS[1], ARGV[1]) == 0 then
	return -1
end
local holds = redis.call("HINCRBY", KEYS[1], ARGV[1], -1)
if holds > 0 then
	redis.call("PEXPIRE", KEYS[1], ARGV[2])
	return holds
end
redis.call("DEL", KEYS[1])
redis.call("PUBLISH", KEYS[1] .. ARGV[3], ARGV[1])
return 0
