-- Move a day key's sequence forward to at least a value, never back: after
-- Redis lost the key, the next IDs of the day must not repeat the ones it
-- issued before.
-- KEYS[1] the day key; ARGV[1] the sequence to reach; ARGV[2] the key's TTL
-- in milliseconds. Returns the sequence the key holds afterwards.
local seq = tonumber(ARGV[1])
local cur = tonumber(redis.call("GET", KEYS[1]) or "0")
if cur >= seq then
	return cur
end
redis.call("SET", KEYS[1], seq, "PX", ARGV[2])
return seq
