-- Counts a request in a fixed window: KEYS[1] the window's key, ARGV[1]
-- its length in ms. Returns the count so far, this request included.
local n = redis.call('INCR', KEYS[1])
if n == 1 then
	redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return n
