package lock

import (
	"database/sql"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Backends are the servers a strategy may lock on. A strategy takes what it
// needs and refuses with ErrUnsupported when that is missing.
type Backends struct {
	// Redis is the main Redis server, where the stock lives.
	Redis redis.UniversalClient
	// Nodes are independent Redis servers for redlock (REDIS_ADDRS).
	Nodes []*redis.Client
	// SQL is the database, for the mysql strategy.
	SQL *sql.DB
	// SQLDialect is the database's GORM dialect name: "mysql" or "sqlite".
	SQLDialect string
	// Etcd connects to etcd, for the etcd strategy, on its first use.
	Etcd EtcdConnect
}

// Strategy is one row of the ladder.
type Strategy struct {
	// Name is the user-facing identifier.
	Name string `json:"name"`
	// Summary says in one line what it fixes and what it breaks.
	Summary string `json:"summary"`
	// Fixes says what this rung fixes of the one before it.
	Fixes string `json:"fixes"`
	// Breaks says what still goes wrong, and how.
	Breaks string `json:"breaks"`
	// Commands are the Redis (or SQL) commands it sends, one entry per
	// round trip, in the order a lock's life sends them.
	Commands []string `json:"commands"`
	// Test names the test in this package that shows the flaw (or, for the
	// safe rungs, the safety) happen; `go test -run` takes it as it is.
	Test string `json:"test"`
	new  func(Backends) (Locker, error)
}

// strategies is the ladder in teaching order: the one table that maps a
// user-facing name to its implementation.
var strategies = []Strategy{
	{Name: "none", Summary: "No lock: the baseline; read-modify-write oversells.",
		Fixes:    "Nothing: it is the baseline the other rungs are measured against.",
		Breaks:   "Concurrent buyers all read the same stock, each writes back its own decrement, and decrements are lost: more orders than stock.",
		Commands: []string{},
		Test:     "TestLockContract/none",
		new:      func(Backends) (Locker, error) { return None{}, nil }},
	{Name: "local", Summary: "In-process mutex: safe in one process, oversells across several.",
		Fixes:    "Lost updates inside one process: a mutex per key serialises its goroutines.",
		Breaks:   "Each process has its own mutexes. Run two instances of the service and both enter the critical section at once.",
		Commands: []string{},
		Test:     "TestCrossProcess/local",
		new:      func(Backends) (Locker, error) { return NewLocal(), nil }},
	{Name: "setnx", Summary: "SETNX, DEL to release: shared by all processes; a holder that dies leaves the lock forever.",
		Fixes:    "The lock lives in Redis, so every process sees the same one.",
		Breaks:   "No expiry. A holder that dies before its DEL leaves the key for ever; every later acquire fails until someone deletes it by hand.",
		Commands: []string{"SETNX key 1", "DEL key"},
		Test:     "TestSetNXCrashedHolderLocksForever",
		new:      onRedis(func(c redis.UniversalClient) Locker { return NewSetNX(c) })},
	{Name: "setnx-expire", Summary: "SETNX, then EXPIRE: a dead holder's lock expires, unless it died between the two commands.",
		Fixes:    "A holder that dies after taking the lock no longer blocks it for ever: the key expires.",
		Breaks:   "SETNX and EXPIRE are two round trips. A crash between them leaves the key with no TTL (TTL -1): the same deadlock as setnx.",
		Commands: []string{"SETNX key 1", "PEXPIRE key ttl", "DEL key"},
		Test:     "TestSetNXExpireCrashLeavesNoTTL",
		new:      onRedis(func(c redis.UniversalClient) Locker { return NewSetNXExpire(c) })},
	{Name: "getset", Summary: "SETNX of an expiry stamp, GETSET takeover of an expired one: no TTL needed; trusts every client's clock.",
		Fixes:    "No lock without expiry: the value is the expiry time, and a waiter that reads a past stamp takes over with GETSET, winning only if GETSET returns the stamp it read.",
		Breaks:   "Expiry is judged by client clocks: a client whose clock runs ahead takes over a live lock. The losing GETSET overwrites the winner's stamp, and anyone can DEL.",
		Commands: []string{"SETNX key stamp", "GET key", "GETSET key stamp", "DEL key"},
		Test:     "TestGetSetSkewedClockTakesOverLiveLock",
		new:      onRedis(func(c redis.UniversalClient) Locker { return NewGetSet(c) })},
	{Name: "lua-setnx", Summary: "SETNX and EXPIRE in one Lua script: atomic; no owner, release is a plain DEL.",
		Fixes:    "Redis runs a script atomically, so no crash can leave a lock without a TTL.",
		Breaks:   "Every holder writes the same value, so the lock has no owner. A retried or late DEL deletes the next holder's lock, and a third client enters beside it.",
		Commands: []string{"EVALSHA setnx_expire.lua (SETNX, PEXPIRE)", "DEL key"},
		Test:     "TestLuaSetNXRetriedReleaseFreesSuccessor",
		new:      onRedis(func(c redis.UniversalClient) Locker { return NewLuaSetNX(c) })},
	{Name: "setnx-px", Summary: "SET NX PX with a fixed value: atomic in one command; a late release deletes whoever holds the lock now.",
		Fixes:    "The same atomicity in one native command, no script.",
		Breaks:   "Still no owner. A holder paused past its TTL wakes, sends DEL and deletes its successor's lock; a third client then holds the lock beside the second.",
		Commands: []string{"SET key 1 NX PX ttl", "DEL key"},
		Test:     "TestSetNXPXPausedHolderDeletesSuccessor",
		new:      onRedis(func(c redis.UniversalClient) Locker { return NewSetNXPX(c) })},
	{Name: "token", Summary: "SET NX PX with a random token, released by Lua compare-and-delete: only the owner releases; a paused holder can outlive its lease.",
		Fixes:    "Each holder writes a random token and releases with a compare-and-delete, so a late release is refused (ErrNotHeld) instead of freeing someone else's lock. The release publishes a notice that wakes waiters at once.",
		Breaks:   "A holder paused past its TTL keeps working while the next holder works; the refusal comes after the harm. Not reentrant: a holder that acquires the same key again waits for itself. On a replicated Redis a failover loses the lock: the master grants it and dies before its replica has it, and the promoted replica grants it again (scenario failover; WAIT 1 after acquiring refuses such a grant).",
		Commands: []string{"SET key token NX PX ttl", "SUBSCRIBE key:released (first waiter on the key)", "EVALSHA release.lua (GET, DEL, PUBLISH)"},
		Test:     "TestTokenPausedHolderOverlaps",
		new:      onRedis(func(c redis.UniversalClient) Locker { return NewToken(c) })},
	{Name: "reentrant", Summary: "Redisson's RLock: a hash of owner and hold count in Lua; the same owner may lock again and must unlock as often.",
		Fixes:    "Reentrancy: the owner (lock.WithOwner) who holds the lock may acquire it again; HINCRBY counts the holds, and only the last release deletes the lock and publishes it.",
		Breaks:   "The same expiry as token: a holder paused past its TTL still overlaps the next one. Two requests given the same owner id by mistake share the lock.",
		Commands: []string{"EVALSHA reentrant_acquire.lua (EXISTS, HEXISTS, HINCRBY, PEXPIRE)", "SUBSCRIBE key:released (first waiter on the key)", "EVALSHA reentrant_release.lua (HEXISTS, HINCRBY, PEXPIRE or DEL and PUBLISH)"},
		Test:     "TestReentrantNestedAcquire",
		new:      onRedis(func(c redis.UniversalClient) Locker { return NewReentrant(c) })},
	{Name: "watchdog", Summary: "token renewed every TTL/3 while held: a long hold keeps its lock, a dead holder loses it after one TTL; a paused process loses it too, unknowing.",
		Fixes:    "A long hold in a live process no longer outlives its lease: a timer renews the TTL every TTL/3 while the lease is held, so nobody enters beside a holder that is slow at its work. If a renewal finds the lock gone, lock.Lost(lease) fires.",
		Breaks:   "It fixes long holds, not pauses. A pause of the whole process (a stop-the-world GC, a frozen VM, SIGSTOP) stops the renewals with it: the lock expires, the next holder enters, and the paused one learns it lost the lock only when it wakes, after the harm. Renewal also proves the process alive, not making progress: a hung holder holds for ever. Only fencing makes the pause safe.",
		Commands: []string{"SET key token NX PX ttl", "EVALSHA renew.lua (GET, PEXPIRE), every TTL/3", "EVALSHA release.lua (GET, DEL, PUBLISH)"},
		Test:     "TestWatchdogPausedProcessLosesLock",
		new:      onRedis(func(c redis.UniversalClient) Locker { return NewWatchdog(c) })},
	{Name: "redlock", Summary: "Redlock: SET NX PX on a majority of independent Redis nodes: survives a minority of dead nodes; a paused holder can still outlive its lease.",
		Fixes:    "The single Redis as a single point of failure: the lock is held when a majority of independent nodes (N/2+1) granted it, so a minority may crash or be unreachable. The lease counts only the validity left: TTL minus the time acquisition took minus a drift allowance.",
		Breaks:   "Still a lease: a holder paused past its validity works beside the next holder, and no token tells the store. Safety also assumes clocks that run alike: one node whose clock jumps lets two clients hold a majority at once, on five nodes or seven (scenario clock-jump); only a fence checked by the store refuses the second writer. A node that restarts empty while a lease it granted is live can hand out a second majority too.",
		Commands: []string{"SET key token NX PX ttl, on every node in parallel", "EVALSHA release.lua (GET, DEL), on every node that may hold it"},
		Test:     "TestRedlockQuorum",
		new:      newRedlockBackends},
	{Name: "fenced", Summary: "SET NX PX plus a fencing token drawn in the same script; stores refuse writes with an older token: a paused holder's late write is rejected.",
		Fixes:    "The paused holder: each acquisition INCRs a per-key counter in the same script as its SET NX PX. The stock reads a shard through the fence (fenced_read.lua) and writes it through the fence (rmw_write.lua), each of which records the token and refuses one lower than the highest it has seen: once a newer holder has touched the shard, a holder whose lease ran out can neither read nor write it, so its stale read-modify-write cannot land.",
		Breaks:   "Safety, not liveness: the stale holder's work is refused (the service answers 503 lease_lost) and must be retried. Only stores that check the token are protected, and the lock itself is as available as the one Redis. Its counter lives beside the lock: on a replicated Redis it fails over with it, the promoted replica draws the lost holder's token again, and the fence refuses neither write (scenario failover); etcd's revision does not fail over.",
		Commands: []string{"EVALSHA fenced_acquire.lua (SET NX PX, INCR key:fence)", "EVALSHA fenced_read.lua (GET, GET, SET), the stock's guarded read", "EVALSHA rmw_write.lua (GET, GET, EXISTS, SET, SET, HSET, SET), the stock's guarded write", "EVALSHA release.lua (GET, DEL, PUBLISH)"},
		Test:     "TestFencedStaleHolder",
		new:      onRedis(func(c redis.UniversalClient) Locker { return NewFenced(c) })},
	{Name: "etcd", Summary: "etcd's lock recipe (a session lease, the oldest key under a prefix holds): a grant survives a leader's death (CP); the key's create revision is a fencing token the stock checks.",
		Fixes:    "The failover that loses a Redis lock: etcd answers a grant only once a majority of its members has it, so a leader that dies takes no grant with it and no second holder appears. The session's lease is the TTL and its keep-alive the watchdog; lock.Lost(lease) fires when it lapses. The lock key's create revision grows with every grant, and the stock reads and writes through the same fence as fenced, so a holder whose session expired cannot write once a newer holder has touched the shard (503 lease_lost).",
		Breaks:   "A paused holder still believes it holds the lock: its keep-alive stops with it, the lease expires, another holder is granted the lock, and only the fence refuses the stale write. A minority partition does the same to a holder cut off from the majority. Every acquisition is a session of its own (a lease granted and revoked), so it costs more round trips than any Redis lock, each a Raft commit; and etcd is one more service to run.",
		Commands: []string{"LeaseGrant ttl", "LeaseKeepAlive (the session's stream; again every TTL/3)", "Txn (put key/lease if absent; get the oldest key under the prefix)", "Get + Watch per holder ahead, then Get of its own key (only while waiting)", "EVALSHA fenced_read.lua / rmw_write.lua, the stock's guarded read and write", "LeaseRevoke (deletes the lock key)"},
		Test:     "TestEtcdPausedHolder",
		new:      newEtcdBackends},
	{Name: "mysql", Summary: "MySQL GET_LOCK held by a dedicated connection through the critical section: released when the session dies; costs a connection per waiter, refused on SQLite.",
		Fixes:    "Expiry guesswork: the named lock lasts exactly as long as the holder's session, with no TTL to choose, and a waiter is woken by the server the moment it is released.",
		Breaks:   "Each waiter holds a pooled connection while it waits, so a small pool starves the holder; the database becomes the lock server for every request; a holder whose connection silently dies loses the lock without knowing. Refused on SQLite, which has no GET_LOCK and ignores row locks.",
		Commands: []string{"SELECT GET_LOCK(name, wait)", "SELECT RELEASE_LOCK(name)"},
		Test:     "TestMySQLAcrossProcesses",
		new:      newMySQLBackends},
}

// onRedis adapts a constructor of a strategy that locks on the main Redis,
// refusing when there is none.
func onRedis(build func(redis.UniversalClient) Locker) func(Backends) (Locker, error) {
	return func(b Backends) (Locker, error) {
		if b.Redis == nil {
			return nil, fmt.Errorf("%w: needs the main Redis", ErrUnsupported)
		}
		return build(b.Redis), nil
	}
}

// Strategies lists the registered strategies in teaching order.
func Strategies() []Strategy { return append([]Strategy(nil), strategies...) }

// Lookup returns the strategy registered under name.
func Lookup(name string) (Strategy, error) {
	for _, s := range strategies {
		if s.Name == name {
			return s, nil
		}
	}
	return Strategy{}, fmt.Errorf("%w %q", ErrUnknownStrategy, name)
}

// New builds the strategy registered under name on b. Lockers that keep a
// connection open (token, reentrant and watchdog hold a pub/sub
// subscription) implement io.Closer: close them when done with them.
func New(name string, b Backends) (Locker, error) {
	s, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	return s.new(b)
}
