package main

import "time"

// Mutation breaks one promise: in File, the text Find (which must be there
// exactly once) becomes Replace, and go test -run Run in Pkg must then fail.
type Mutation struct {
	// Name says what the mutation breaks; -run selects rows by it.
	Name string
	// Promise starts the first cell of the INVARIANT.md row it covers, or
	// is "rung " and a lock's name for a rung of the ladder.
	Promise string
	File    string
	Find    string
	Replace string
	Pkg     string
	// Run is go test's -run: its test must be one the promise cites.
	Run string
	// Needs are the variables a real server's test needs; the row is
	// skipped when one is not set.
	Needs []string
	// Timeout bounds the row's go test (-timeout's value when zero).
	Timeout time.Duration
}

// realServers: the fault tests start servers of their own (redis-server,
// mariadbd) and need the binaries; CI, which has them, also sets these.
var realServers = []string{"REDIS_ADDR", "MYSQL_DSN"}

// mqServer: TestMQ needs RabbitMQ, which a bare machine does not have.
var mqServer = []string{"RABBITMQ_URL"}

// ledger is the promise ledger. Each promise of INVARIANT.md's failures
// table and each rung of the lock ladder has a row, or is in uncovered.
var ledger = []Mutation{
	{Name: "take-retry-takes-again", Promise: "the Redis client's reply is lost",
		File: "internal/stock/take.lua", Find: "if prior then\n\treturn {-1, prior}\nend\nlocal n", Replace: "if false then\n\treturn {-1, prior}\nend\nlocal n",
		Pkg: "./internal/order", Run: "^TestSameKeySameOrder$"},
	{Name: "retry-after-sold-out-told-sold-out", Promise: "a client retries a purchase",
		File: "internal/order/purchase.go", Find: "case errors.Is(err, stock.ErrSoldOut) && sl.retry:", Replace: "case errors.Is(err, stock.ErrSoldOut) && sl.retry && false:",
		Pkg: "./internal/order", Run: "^TestRetryAfterSoldOutGetsItsOrder$"},
	{Name: "any-host-served", Promise: "a page rebinds its DNS name",
		File: "internal/server/host.go", Find: "if s.servesHost(c.Request) {", Replace: "if true || s.servesHost(c.Request) {",
		Pkg: "./internal/server", Run: "^TestRebindingHostIsRefused$"},
	{Name: "operator-check-open", Promise: "anyone changes a live sale",
		File: "internal/server/server.go", Find: "\t\ts.fail(c, http.StatusUnauthorized, api.CodeUnauthorized,", Replace: "\t\treturn\n\t\ts.fail(c, http.StatusUnauthorized, api.CodeUnauthorized,",
		Pkg: "./internal/server", Run: "^TestOnlyTheOperatorChangesASale$"},
	{Name: "control-character-in-a-name", Promise: "a body with an id ≤ 0",
		File: "internal/catalogue/catalogue.go", Find: "strings.ContainsFunc(p.Name, unicode.IsControl):", Replace: "strings.ContainsFunc(p.Name, unicode.IsControl) && false:",
		Pkg: "./internal/server", Run: "^TestBadNamesAndIDsAre400$"},
	{Name: "slow-body-never-times-out", Promise: "a slow body, or a body that arrived",
		File: "internal/server/decode.go", Find: "rc.SetReadDeadline(time.Now().Add(bodyGrace))", Replace: "rc.SetReadDeadline(time.Time{})",
		Pkg: "./internal/server", Run: "^TestSlowBodyIsTimeout$", Timeout: 2 * time.Minute},
	{Name: "lock-owner-is-the-client-key", Promise: "many buyers send one `Idempotency-Key`",
		File: "internal/order/purchase.go", Find: `strconv.FormatInt(user, 10) + ":" + key`, Replace: `strconv.FormatInt(0, 10) + ":" + key`,
		Pkg: "./internal/server", Run: "^TestSharedIdempotencyKeyIsNotSharedByBuyers$/^reentrant$"},
	{Name: "rmw-write-ignores-the-lease", Promise: "a service instance paused",
		File: "internal/stock/rmw_write.lua", Find: `if ARGV[5] ~= "" and redis.pcall("GET", KEYS[4]) ~= ARGV[5] then`, Replace: "if false then",
		Pkg: "./internal/stock", Run: "^TestGuardedWriteRefusesALostLease$"},
	{Name: "reconciler-never-gives-back", Promise: "a process dies between the take and the INSERT",
		File: "internal/reconcile/reconcile.go", Find: "back, err := rec.stock.GiveBack(ctx, req, stock.Taken{Entry: e})", Replace: "_, back, err := req, false, error(nil)",
		Pkg: "./internal/reconcile", Run: "^TestReconcilerReturnsStrandedUnits$"},
	{Name: "lost-stock-read-as-sold-out", Promise: "Redis restarts empty",
		File: "internal/order/purchase.go", Find: `return Order{}, fmt.Errorf("%w: product %d", ErrRebuilding, p.ID)`, Replace: `return Order{}, fmt.Errorf("%w: product %d", stock.ErrSoldOut, p.ID)`,
		Pkg: "./internal/order", Run: "^TestRebuildAfterRedisLostTheStock$"},
	{Name: "insert-ignores-the-layout", Promise: "a reset during a burst",
		File: "internal/order/record.go", Find: "FROM products WHERE `id` = ? AND `epoch` = ?\"", Replace: "FROM products WHERE `id` = ? AND ? IS NOT NULL\"",
		Pkg: "./internal/order", Run: "^TestLateInsertAfterANewLayoutIsRefused$"},
	{Name: "db-insert-refusal-committed", Promise: "a reset during a burst",
		File: "internal/order/record.go", Find: "\t\tif err == nil && n == 0 {\n\t\t\terr = errStale\n\t\t}\n", Replace: "\t\t_ = n\n",
		Pkg: "./internal/order", Run: "^TestDBInsertAfterAResetIsRefused$"},
	{Name: "lab-options-on-any-product", Promise: "an anonymous client asks for a lock",
		File: "internal/order/purchase.go", Find: "if in.Lab.set() && !p.Lab {", Replace: "if false {",
		Pkg: "./internal/order", Run: "^TestLabOptionsOnlyOnLabProducts$"},
	{Name: "foreign-layout-laid-over", Promise: "a second process on a fresh database",
		File: "internal/catalogue/catalogue.go", Find: "if _, found, err := c.stock.Ledgers().ReadMarker(ctx, spec.ID); err != nil || found {", Replace: "if _, found, err := c.stock.Ledgers().ReadMarker(ctx, spec.ID); err != nil || found && false {",
		Pkg: "./internal/order", Run: "^TestCreateIfAbsentLeavesAForeignLayout$"},
	{Name: "db-take-without-the-stock-check", Promise: "the db mode",
		File: "internal/stock/take.go", Find: `Where("product_id = ? AND shard = ? AND stock > 0", p.ID, t.Shard).`, Replace: `Where("product_id = ? AND shard = ? AND stock > -1000000", p.ID, t.Shard).`,
		Pkg: "./internal/server", Run: "^TestEveryBuyerGetsExactlyTheStock$/^none$/^db$"},
	{Name: "sqlrmw-releases-before-commit", Promise: "the sqlrmw mode",
		File: "internal/order/record.go", Find: "\terr = tx.Commit().Error\n\ts.release(ctx, held, rc)\n", Replace: "\ts.release(ctx, held, rc)\n\terr = tx.Commit().Error\n",
		Pkg: "./internal/order", Run: "^TestSQLRMWReleaseBeforeCommit$/^after_commit$"},
	{Name: "sqlrmw-write-unguarded", Promise: "a holder paused past its lease between its SELECT and its UPDATE",
		File: "internal/stock/sqlrmw.go", Find: `update, args = update+" AND stock = ?", append(args, n)`, Replace: `update, args = update+" AND ? IS NOT NULL", append(args, n)`,
		Pkg: "./internal/stock", Run: "^TestSQLRMWGuardRefusesALostLease$"},
	{Name: "dead-letter-keeps-the-unit", Promise: "the async mode: a row the database refuses",
		File: "internal/stock/dead_letter.lua", Find: "if rec and string.match(rec, \"^%S+\") == ARGV[3] then", Replace: "if false then",
		Pkg: "./internal/order", Run: "^TestRefusedOrderGoesToTheDeadLetters$"},
	{Name: "cancel-without-the-status-check", Promise: "pay, cancel and the payment window's end at once",
		File: "internal/order/lifecycle.go", Find: `q := tx.Model(&Order{}).Where("id = ? AND status = ?", int64(o.ID), Unpaid)`, Replace: `q := tx.Model(&Order{}).Where("id = ? AND ? IS NOT NULL", int64(o.ID), Unpaid)`,
		Pkg: "./internal/server", Run: "^TestLifecycleRaces$"},
	{Name: "cancel-gives-back-before-its-commit", Promise: "the database refuses a cancel",
		File: "internal/order/lifecycle.go", Find: "if errors.Is(err, errLost) {\n\t\treturn false, nil\n\t}\n\tif err != nil {\n", Replace: "if errors.Is(err, errLost) {\n\t\treturn false, nil\n\t}\n\tif err != nil {\n\t\tlc.returnUnit(ctx, p, o)\n",
		Pkg: "./internal/server", Run: "^TestCancelWhenABackendFails$"},
	{Name: "give-back-keeps-the-take", Promise: "Redis fails after a cancel's commit",
		File: "internal/stock/give_back.lua", Find: "redis.call(\"HDEL\", KEYS[3], ARGV[1])\nif redis.call(\"EXISTS\", KEYS[1]) == 1 then", Replace: "if redis.call(\"EXISTS\", KEYS[1]) == 1 then",
		Pkg: "./internal/server", Run: "^TestCancelWhenABackendFails$"},
	{Name: "read-fence-accepts-an-older-token", Promise: "a service instance paused",
		File: "internal/stock/fenced_read.lua", Find: "if token < tonumber(redis.call(\"GET\", KEYS[2]) or \"0\") then\n\treturn {-3}", Replace: "if false then\n\treturn {-3}",
		Pkg: "./internal/stock", Run: "^TestFenceRefusesOlderTokens$"},
	{Name: "audit-blind-to-told-not-stored", Promise: "an order told of (201, 202) and then lost whole",
		File: "internal/reconcile/audit.go", Find: "a.ToldNotStored > 0 && (a.Verdict == api.VerdictOK", Replace: "a.ToldNotStored > 1<<30 && (a.Verdict == api.VerdictOK",
		Pkg: "./internal/testkit/faults", Run: "^TestAuditSeesToldNotStored$"},
	{Name: "pay-after-the-window", Promise: "pay, cancel and the payment window's end at once",
		File: "internal/order/lifecycle.go", Find: "(due_at IS NULL OR due_at > ?)", Replace: "(due_at IS NULL OR due_at > ? OR 1 = 1)",
		Pkg: "./internal/order", Run: "^TestPayAfterTheWindowBeforeTheExpirer$"},
	// The fault suite's rows: each test starts what it needs (a redis-server
	// or mariadbd of its own where the row needs one, else testenv's).
	{Name: "async-unknown-outcome-names-no-order", Promise: "the async mode: a take's reply lost",
		File: "internal/order/purchase.go", Find: "return taken, &UnsettledError{Order: req.Ticket.Order, Err: err}", Replace: "return taken, &UnsettledError{Order: 0, Err: err}",
		Pkg: "./internal/testkit/faults", Run: "^TestAsyncUnknownOutcomeNamesTheOrder$"},
	{Name: "queued-order-window-from-the-take", Promise: "the async and mq modes: paying a queued order",
		File: "internal/order/writer.go", Find: "d := now.Add(q.Due.Sub(q.At))", Replace: "d := q.At.Add(q.Due.Sub(q.At))",
		Pkg: "./internal/testkit/faults", Run: "^TestAsyncOrdersPayableInAOneSecondWindow$"},
	{Name: "consumer-refuses-a-past-sale", Promise: "the async mode: a reset in the middle of a burst",
		File: "internal/order/writer.go", Find: "!ok || l.Sale == q.Sale && l.Epoch != q.Layout.Epoch {", Replace: "!ok || l.Epoch != q.Layout.Epoch {",
		Pkg: "./internal/testkit/faults", Run: "^TestResetMidAsyncBurst$"},
	{Name: "restore-keeps-the-unit-on-sale", Promise: "Redis forgot takes whose orders exist",
		File: "internal/stock/restore.lua", Find: "if tonumber(n) > 0 then\n\tredis.call(\"DECR\", KEYS[1])\n", Replace: "if tonumber(n) > 0 then\n",
		Pkg: "./internal/testkit/faults", Run: "^TestRepairForgottenTakes$/^ReconcilerPass$/^0$"},
	{Name: "id-blocks-not-dropped", Promise: "Redis restarted from its AOF or an RDB",
		File: "internal/idgen/redis.go", Find: "keys := g.aroundNow()\n\tif err := dropScript", Replace: "keys := g.aroundNow()[:0]\n\tif err := dropScript",
		Pkg: "./internal/idgen", Run: "^TestRedisBackFromSnapshot$/^DropBlocks=true$"},
	{Name: "redis-dialled-again-and-again", Promise: "Redis is down",
		File: "internal/app/backends.go", Find: "MaxRetries:    1,\n\t\tDialTimeout:   500 * time.Millisecond,\n\t\tDialerRetries: 1,", Replace: "MaxRetries:    1,\n\t\tDialTimeout:   500 * time.Millisecond,\n\t\tDialerRetries: 30,",
		Pkg: "./internal/testkit/faults", Run: "^TestRedisDownAnswersQuickly$", Needs: realServers, Timeout: 3 * time.Minute},
	{Name: "tables-in-the-database-default-charset", Promise: "a database whose default charset is latin1",
		File: "internal/app/backends.go", Find: `db = db.Set("gorm:table_options", "DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci")`, Replace: `db = db.Set("gorm:table_options", "")`,
		Pkg: "./internal/testkit/faults", Run: "^TestChineseNameOnLatin1Database$", Needs: realServers, Timeout: 3 * time.Minute},
	{Name: "sold-out-final-with-units-unsettled", Promise: "a database stall",
		File: "internal/order/unsettled.go", Find: "case errors.Is(err, stock.ErrSoldOut):", Replace: "case errors.Is(err, stock.ErrSoldOut) && false:",
		Pkg: "./internal/testkit/faults", Run: "^TestSoldOutNotFinalWhileUnitsUnsettled$", Needs: realServers, Timeout: 3 * time.Minute},
	{Name: "unwritten-marks-not-held", Promise: "Redis paused (SIGSTOP) past a purchase's take",
		File: "internal/order/marks.go", Find: "\tm.hold(l, order)\n\tif err := m.w.MarkUnsettled(ctx, l, order); err != nil {", Replace: "\tif err := m.w.MarkUnsettled(ctx, l, order); err != nil {",
		Pkg: "./internal/testkit/faults", Run: "^TestRedisPausedSoldOutNotFinal$", Needs: realServers, Timeout: 3 * time.Minute},
	{Name: "async-on-a-redis-that-keeps-nothing", Promise: "a product that is not a lab product asks for the async or mq mode",
		File: "internal/catalogue/durability.go", Find: "if r.Level != durability.None {", Replace: "if true || r.Level != durability.None {",
		Pkg: "./internal/testkit/faults", Run: "^TestDurabilityDecides$", Needs: realServers, Timeout: 3 * time.Minute},
	{Name: "audit-ok-after-a-rebuild-lost-the-queue", Promise: "Redis restarted empty under a backlog",
		File: "internal/reconcile/audit.go", Find: "if a.Verdict == api.VerdictOK {\n\t\t\t\ta.Verdict = api.VerdictRebuilt", Replace: "if false {\n\t\t\t\ta.Verdict = api.VerdictRebuilt",
		Pkg: "./internal/testkit/faults", Run: "^TestAuditAfterRebuildSaysWhatItCannotCount$", Needs: realServers, Timeout: 3 * time.Minute},
	{Name: "audit-never-settling", Promise: "Redis restarted from its append-only file",
		File: "internal/reconcile/audit.go", Find: "if a.Replaying > 0 && a.Verdict == api.VerdictOK {", Replace: "if false && a.Replaying > 0 {",
		Pkg: "./internal/testkit/faults", Run: "^TestAsyncReplayAfterRestartFromAOF$", Needs: realServers, Timeout: 3 * time.Minute},
	{Name: "claimed-deadline-removed", Promise: "a process dies holding claimed payment deadlines",
		File: "internal/stock/claim_due.lua", Find: `redis.call("ZADD", KEYS[1], later, id)`, Replace: `redis.call("ZREM", KEYS[1], id)`,
		Pkg: "./internal/testkit/faults", Run: "^TestKilledExpirerLosesNoDeadline$", Needs: realServers, Timeout: 3 * time.Minute},
	{Name: "replica-not-awaited", Promise: "a replicated product",
		File: "internal/stock/replica.go", Find: "case replicas < 1:", Replace: "case replicas < 0:",
		Pkg: "./internal/testkit/faults", Run: "^TestReplicatedProduct$", Needs: realServers, Timeout: 3 * time.Minute},
	{Name: "stalled-consumer-orders-never-claimed", Promise: "the async mode: a service process SIGKILLed",
		File: "internal/stock/queue.go", Find: "MinIdle: minIdle, Start: \"0-0\", Count: count,\n\t}).Result()\n", Replace: "MinIdle: minIdle, Start: \"0-0\", Count: count,\n\t}).Result()\n\tmsgs = nil\n",
		Pkg: "./internal/testkit/faults", Run: "^TestAsyncConsumerKilledMidDrain$", Needs: realServers, Timeout: 3 * time.Minute},
	{Name: "consumer-retries-without-backoff", Promise: "the async mode: the database unreachable",
		File: "internal/outbox/consumer.go", Find: "c.sleep(backoff)", Replace: "c.sleep(backoff / 1000)",
		Pkg: "./internal/testkit/faults", Run: "^TestDatabaseFaults$/^AsyncCut10s$", Needs: realServers, Timeout: 3 * time.Minute},
	{Name: "lock-pool-unbounded", Promise: "many waiters under the `mysql` lock",
		File: "internal/lock/pool.go", Find: "db.SetMaxOpenConns(conns)", Replace: "db.SetMaxOpenConns(0)",
		Pkg: "./internal/testkit/faults", Run: "^TestDatabaseFaults$/^LockBurstLeavesRoomForOthers$", Needs: realServers, Timeout: 3 * time.Minute},
	{Name: "migrations-without-the-lock", Promise: "instances started at once",
		File: "internal/order/service.go", Find: "\t\tkey := \"seckill:migrate:\" + db.Migrator().CurrentDatabase()\n\t\tlease, err := m.Acquire(ctx, key, lock.Options{Wait: migrationWait})", Replace: "\t\tkey := \"seckill:migrate:\" + db.Migrator().CurrentDatabase()\n\t\tlease, err := lock.NewLocal().Acquire(ctx, key, lock.Options{Wait: migrationWait})\n\t\t_ = m",
		Pkg: "./internal/testkit/faults", Run: "^TestInstancesStartedTogether$", Needs: realServers, Timeout: 3 * time.Minute},
	{Name: "rebuilt-layout-orders-written", Promise: "the async mode: an order in a consumer's hand across a rebuild",
		File: "internal/order/writer.go", Find: "!ok || l.Sale == q.Sale && l.Epoch != q.Layout.Epoch {", Replace: "!ok || l.Sale == q.Sale && l.Epoch != q.Layout.Epoch && false {",
		Pkg: "./internal/order", Run: "^TestAsyncOrderInHandAcrossARebuild$"},
	// The mq mode's rows: TestMQ needs RabbitMQ.
	{Name: "unconfirmed-publish-given-back", Promise: "the mq mode: a publish whose confirmation does not come",
		File: "internal/order/mode_mq.go", Find: "case errors.Is(err, outbox.ErrNotSent):", Replace: "case errors.Is(err, outbox.ErrNotSent) || err != nil:",
		Pkg: "./internal/outbox", Run: "^TestMQ$/^UnconfirmedPublish$", Needs: mqServer},
	{Name: "mq-takes-held-with-the-queue-empty", Promise: "the mq mode: a process dies between the take and the publish",
		File: "internal/reconcile/reconcile.go", Find: "if depth > 0 {", Replace: "if depth >= 0 {",
		Pkg: "./internal/outbox", Run: "^TestMQ$/^CrashAfterTake$", Needs: mqServer},
	{Name: "voided-order-given-back-by-the-consumer", Promise: "the mq mode: an order reaches the consumer after the reconciler voided its id",
		File: "internal/order/writer.go", Find: "w.Voided = append(w.Voided, q)", Replace: `w.Refused = append(w.Refused, outbox.Refusal{Order: q, Reason: "void"})`,
		Pkg: "./internal/outbox", Run: "^TestMQ$/^VoidRowDropsTheOrder$", Needs: mqServer},
	{Name: "deliveries-acknowledged-on-receipt", Promise: "the mq mode: a consumer dies with a batch in hand",
		File: "internal/outbox/broker.go", Find: `ch.Consume(b.queue, "", false, false, false, false, nil)`, Replace: `ch.Consume(b.queue, "", true, false, false, false, nil)`,
		Pkg: "./internal/outbox", Run: "^TestMQ$/^Broker$", Needs: mqServer},
	// The ladder: each rung's test shows its flaw (or, for the safe rungs,
	// its safety) happen; the mutation takes the flaw away, or the safety.
	{Name: "none-locks", Promise: "rung none",
		File: "internal/lock/none.go", Find: "func (None) Acquire(context.Context, string, Options) (Lease, error) { return noLease{}, nil }",
		Replace: "func (None) Acquire(ctx context.Context, key string, opt Options) (Lease, error) { return noneLock.Acquire(ctx, key, opt) }\n\nvar noneLock = NewLocal()",
		Pkg:     "./internal/lock", Run: "^TestLockContract$/^none$"},
	{Name: "local-locks-in-redis", Promise: "rung local",
		File: "internal/lock/registry.go", Find: "new:      func(Backends) (Locker, error) { return NewLocal(), nil }},",
		Replace: "new:      onRedis(func(c redis.UniversalClient) Locker { return NewToken(c) })},",
		Pkg:     "./internal/lock", Run: "^TestCrossProcess$/^local$"},
	{Name: "setnx-with-an-expiry", Promise: "rung setnx",
		File: "internal/lock/setnx.go", Find: "if err := setnx(ctx, s.rdb, key, 0, opt.Wait); err != nil {", Replace: "if err := setnx(ctx, s.rdb, key, opt.ttl(), opt.Wait); err != nil {",
		Pkg: "./internal/lock", Run: "^TestSetNXCrashedHolderLocksForever$"},
	{Name: "setnx-expire-expires-before-the-crash", Promise: "rung setnx-expire",
		File: "internal/lock/setnx_expire.go", Find: "if opt.Fault.CrashBeforeExpire {", Replace: "if s.rdb.PExpire(ctx, key, opt.ttl()).Err() == nil && opt.Fault.CrashBeforeExpire {",
		Pkg: "./internal/lock", Run: "^TestSetNXExpireCrashLeavesNoTTL$"},
	{Name: "getset-ignores-the-skewed-clock", Promise: "rung getset",
		File: "internal/lock/getset.go", Find: "now := func() time.Time { return time.Now().Add(opt.Fault.ClockSkew) }", Replace: "now := func() time.Time { return time.Now() }",
		Pkg: "./internal/lock", Run: "^TestGetSetSkewedClockTakesOverLiveLock$"},
	{Name: "lua-setnx-release-deletes-nothing", Promise: "rung lua-setnx",
		File: "internal/lock/setnx.go", Find: "n, err := l.rdb.Del(ctx, l.key).Result()", Replace: "n, err := int64(1), error(nil)",
		Pkg: "./internal/lock", Run: "^TestLuaSetNXRetriedReleaseFreesSuccessor$"},
	{Name: "setnx-px-release-deletes-nothing", Promise: "rung setnx-px",
		File: "internal/lock/setnx.go", Find: "n, err := l.rdb.Del(ctx, l.key).Result()", Replace: "n, err := int64(1), error(nil)",
		Pkg: "./internal/lock", Run: "^TestSetNXPXPausedHolderDeletesSuccessor$"},
	{Name: "token-never-expires", Promise: "rung token",
		File: "internal/lock/token.go", Find: "ok, err := t.rdb.SetNX(ctx, key, value, ttl).Result()", Replace: "ok, err := t.rdb.SetNX(ctx, key, value, ttl*0).Result()",
		Pkg: "./internal/lock", Run: "^TestTokenPausedHolderOverlaps$"},
	{Name: "reentrant-owner-waits-for-itself", Promise: "rung reentrant",
		File: "internal/lock/reentrant_acquire.lua", Find: `or redis.call("HEXISTS", KEYS[1], ARGV[1]) == 1 then`, Replace: "or false then",
		Pkg: "./internal/lock", Run: "^TestReentrantNestedAcquire$"},
	{Name: "watchdog-lease-never-expires", Promise: "rung watchdog",
		File: "internal/lock/token.go", Find: "ok, err := t.rdb.SetNX(ctx, key, value, ttl).Result()", Replace: "ok, err := t.rdb.SetNX(ctx, key, value, ttl*0).Result()",
		Pkg: "./internal/lock", Run: "^TestWatchdogPausedProcessLosesLock$", Timeout: 3 * time.Minute},
	{Name: "redlock-quorum-of-one", Promise: "rung redlock",
		File: "internal/lock/redlock.go", Find: "quorum: len(nodes)/2 + 1}", Replace: "quorum: 1}",
		Pkg: "./internal/lock", Run: "^TestRedlockQuorum$"},
	{Name: "write-fence-accepts-an-older-token", Promise: "rung fenced",
		File: "internal/stock/rmw_write.lua", Find: "if token > 0 and token < tonumber(redis.call(\"GET\", KEYS[2]) or \"0\") then\n\treturn {-3}", Replace: "if false then\n\treturn {-3}",
		Pkg: "./internal/lock", Run: "^TestFencedStaleHolder$"},
	{Name: "etcd-write-fence-accepts-an-older-revision", Promise: "rung etcd",
		File: "internal/stock/rmw_write.lua", Find: "if token > 0 and token < tonumber(redis.call(\"GET\", KEYS[2]) or \"0\") then\n\treturn {-3}", Replace: "if false then\n\treturn {-3}",
		Pkg: "./internal/lock", Run: "^TestEtcdPausedHolder$"},
	{Name: "mysql-lock-always-granted", Promise: "rung mysql",
		File: "internal/lock/mysql.go", Find: `"SELECT GET_LOCK(?, ?)", name, wait.Seconds()`, Replace: `"SELECT 1 OR GET_LOCK(?, ?)", name, wait.Seconds()`,
		Pkg: "./internal/lock", Run: "^TestMySQLAcrossProcesses$"},
}

// uncovered are the promises without a mutation yet, and why.
var uncovered = []struct{ Promise, Why string }{
	{"the async mode on a cluster", faultTestOnly},
	{"an INSERT whose answer is lost", "TestDatabaseFaults/Paused20s passes with the void row skipped (record.go giving the unit back on no answer): no INSERT of a purchase that timed out lands late in it, so it does not show what the void row guards against; a test that makes one land is still to write"},
	{"Redis killed: what a 202 promised", "a scenario's numbers (async-durability), no test"},
}

// faultTestOnly: the rows only internal/testkit/faults shows, with servers
// of its own (minutes a run): their mutations are still to write.
const faultTestOnly = "only a fault test (servers of its own) shows it: its mutation is not written yet"
