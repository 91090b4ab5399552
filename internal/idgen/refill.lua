-- Set a block of sequence numbers reserved in the durable store: the day's
-- next number is past ARGV[1], and none is issued past ARGV[2]. Both only
-- move forward, so two processes setting their blocks in either order leave
-- the later block in force (the earlier one's rest is skipped, never
-- reissued). The key gets its expiry in the same step that creates it.
-- KEYS[1] the day key; ARGV[1] from; ARGV[2] to; ARGV[3] the key's TTL in
-- milliseconds. Returns {seq, ceil} as set.
local v = redis.call("HMGET", KEYS[1], "seq", "ceil")
local seq = math.max(tonumber(v[1]) or 0, tonumber(ARGV[1]))
local ceil = math.max(tonumber(v[2]) or 0, tonumber(ARGV[2]))
redis.call("HSET", KEYS[1], "seq", string.format("%d", seq), "ceil", string.format("%d", ceil))
if redis.call("PTTL", KEYS[1]) < 0 then
	redis.call("PEXPIRE", KEYS[1], ARGV[3])
end
return {seq, ceil}
