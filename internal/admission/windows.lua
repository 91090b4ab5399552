-- Counts a request in the fixed windows of KEYS (keys of one slot), each
-- ARGV[1] ms long. Returns the counts so far, this request included, in
-- the order of KEYS.
local counts = {}
for i, key in ipairs(KEYS) do
	local n = redis.call('INCR', key)
	if n == 1 then
		redis.call('PEXPIRE', key, ARGV[1])
	end
	counts[i] = n
end
return counts
