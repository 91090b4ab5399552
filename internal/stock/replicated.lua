-- Before a replicated product's buyer is told (replica.go): the take is in
-- the shard's ledger on the node that answers, and a write of this
-- connection's own follows it there, so that the WAIT sent after this on
-- the same connection counts the replicas that have the take too (WAIT
-- counts up to the connection's own last write, and a replica applies the
-- master's writes in order).
-- KEYS[1] shard ledger; KEYS[2] the shard's replication mark (its slot).
-- ARGV[1] user id.
-- Returns 1 when the take is there, 0 when it is not (lost with a failover).
if redis.call("HEXISTS", KEYS[1], ARGV[1]) == 0 then
	return 0
end
redis.call("SET", KEYS[2], ARGV[1], "PX", 60000)
return 1
