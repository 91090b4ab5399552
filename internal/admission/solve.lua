-- Takes a captcha for its one try: one round trip, atomic, so that two
-- tries of the same captcha never both see it.
-- KEYS[1]  the captcha's hash (seckill:captcha:<id>)
-- Returns {answer, binding}, or nil when there is no such captcha; the
-- hash is gone afterwards either way.
local v = redis.call('HMGET', KEYS[1], 'answer', 'bind')
if not v[1] then
	return nil
end
redis.call('DEL', KEYS[1])
return v
