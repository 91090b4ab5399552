-- Drop the blocks of the given day keys: after Redis restarted from an AOF
-- or RDB that lost its last writes, a day key may hold a block and a "seq"
-- from before numbers it went on to issue. Without its "ceil", the next draw
-- finds no block and reserves one past every number ever reserved.
for _, key in ipairs(KEYS) do
	redis.call("HDEL", key, "ceil")
end
return #KEYS
