-- Counts a failed sign-in and says how long its (account, address) pair
-- must wait before its next try. KEYS[1] the pair's failures, KEYS[2] the
-- pair's wait, KEYS[3] the account's failures (all of one account: one
-- slot); ARGV: the window (ms) the counts live, the pair's free failures,
-- the account's failures past which its pairs get none free, the first
-- wait (ms), the longest (ms). Returns the wait in ms, 0 for none.
local window, free, loose = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local base, cap = tonumber(ARGV[4]), tonumber(ARGV[5])
local pair = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], window)
local account = redis.call('INCR', KEYS[3])
if account == 1 then
	redis.call('PEXPIRE', KEYS[3], window)
end
if account > loose then
	free = 0
end
if pair <= free then
	return 0
end
local wait = base * 2 ^ math.min(pair - free - 1, 30)
if wait > cap then
	wait = cap
end
redis.call('SET', KEYS[2], 1, 'PX', wait)
return wait
