-- Park a queued order the database refused: copy it to the dead letters
-- with the reason, put its unit back on its shard and forget the take (as
-- give_back.lua does), mark it failed in the pending index so that its
-- buyer reads why, and acknowledge it, in one step: it is neither retried
-- for ever nor lost.
-- KEYS[1] the stream; KEYS[2] shard stock; KEYS[3] shard ledger; KEYS[4]
-- the dead letters; KEYS[5] buyer; KEYS[6] the day's pending index; KEYS[7]
-- the dead letters' count per sale. On a Redis Cluster only the shard's
-- KEYS[1..3] are given, and the caller does the rest in steps of their own
-- (RedisStreams.DeadLetter).
-- ARGV[1] group; ARGV[2] message id; ARGV[3] order id; ARGV[4] user id;
-- ARGV[5] reason; ARGV[6] the message's fields as "name value" pairs, tab
-- separated; ARGV[7] the count's field, "product:sale"; ARGV[8] the
-- pending index's value, "failed @product:user reason" (stock's Queue.Pending).
if KEYS[4] then
	local fields = {}
	for f in string.gmatch(ARGV[6], "[^\t]+") do
		table.insert(fields, f)
	end
	table.insert(fields, "reason")
	table.insert(fields, ARGV[5])
	redis.call("XADD", KEYS[4], "*", unpack(fields))
end
local rec = redis.call("HGET", KEYS[3], ARGV[4])
if rec and string.match(rec, "^%S+") == ARGV[3] then
	redis.call("HDEL", KEYS[3], ARGV[4])
	if redis.call("EXISTS", KEYS[2]) == 1 then
		redis.call("INCR", KEYS[2])
	end
	local b = KEYS[5] and redis.call("GET", KEYS[5])
	if b and string.match(b, "^%S+") == ARGV[3] then
		redis.call("DEL", KEYS[5])
	end
end
if KEYS[6] then
	redis.call("HSET", KEYS[6], ARGV[3], ARGV[8])
	redis.call("HINCRBY", KEYS[7], ARGV[7], 1)
end
redis.call("XACK", KEYS[1], ARGV[1], ARGV[2])
redis.call("XDEL", KEYS[1], ARGV[2])
return 1
