-- Enrol a member (a stream, a deadline set) in a registry at the
-- generation the member's slot gave: the registry keeps the highest
-- generation a member was enrolled at, so that an enrolment arriving late
-- never lowers it below a newer one (see registry.go).
-- KEYS[1] the registry (a hash). ARGV[1] the member; ARGV[2] its generation.
-- Returns 1.
local cur = redis.call("HGET", KEYS[1], ARGV[1])
if not cur or tonumber(cur) < tonumber(ARGV[2]) then
	redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
end
return 1
