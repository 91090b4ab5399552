-- Drop a member from a registry after its slot closed it at generation
-- ARGV[2]: only if it is enrolled at an older generation. A member enrolled
-- at ARGV[2] or later was enrolled after the close, by a writer about to
-- open it again (see registry.go), and stays.
-- KEYS[1] the registry. ARGV[1] the member; ARGV[2] the close's generation.
-- Returns 1 dropped, 0 kept.
local cur = redis.call("HGET", KEYS[1], ARGV[1])
if cur and tonumber(cur) < tonumber(ARGV[2]) then
	redis.call("HDEL", KEYS[1], ARGV[1])
	return 1
end
return 0
