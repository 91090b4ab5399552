-- Set a block of sequence numbers reserved in the durable store, (from, to]:
-- none is issued past to. A block that starts where the day's ends (a
-- reservation made ahead of need, with nobody else's between) extends it;
-- any other starts the day's next number past from, since numbers up to from
-- may have been issued by a Redis that forgot them. Both only move forward,
-- so two processes setting their blocks in either order leave the later in
-- force (the earlier one's rest is skipped, never reissued). The key gets
-- its expiry in the same step that creates it.
-- KEYS[1] the day key; ARGV[1] from; ARGV[2] to; ARGV[3] the key's TTL in
-- milliseconds. Returns {seq, ceil} as set.
local v = redis.call("HMGET", KEYS[1], "seq", "ceil")
local seq = tonumber(v[1]) or 0
local ceil = tonumber(v[2])
local from, to = tonumber(ARGV[1]), tonumber(ARGV[2])
if ceil ~= from then
	seq = math.max(seq, from)
end
ceil = math.max(ceil or 0, to)
redis.call("HSET", KEYS[1], "seq", string.format("%d", seq), "ceil", string.format("%d", ceil))
if redis.call("PTTL", KEYS[1]) < 0 then
	redis.call("PEXPIRE", KEYS[1], ARGV[3])
end
return {seq, ceil}
