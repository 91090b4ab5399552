-- The next sequence number of a day key. The key gets its expiry in the same
-- atomic step that creates it, so no crash between two commands can leave a
-- day key that lives forever (the pattern of the Redis INCR documentation).
-- KEYS[1] the day key; ARGV[1] its time to live in milliseconds.
-- Returns the new sequence number: 1 for the day's first ID.
local seq = redis.call("INCR", KEYS[1])
if seq == 1 then
	redis.call("PEXPIRE", KEYS[1], ARGV[1])
end
return seq
