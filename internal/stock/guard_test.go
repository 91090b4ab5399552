package stock_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"seckill/internal/lock"
	"seckill/internal/stock"
	"seckill/internal/testkit"
	"seckill/internal/testkit/testenv"
)

// A holder that lost its lock between its read and its write, as one paused
// past its lease does: inside A's critical section the lock is taken from
// it (its key deleted, as the lease's expiry would; its MySQL session
// killed; on the local lock, another process's mutex, which never excluded
// A), and B takes a unit under it. On a product sold to the public
// (Product.Guarded) A's write is refused and the store holds exactly what was
// sold, under every lock; on a lab product A writes the stock it read
// before B, and one unit is sold twice, unless the lock's own fencing token
// refuses it (fenced, etcd).
func TestGuardedWriteRefusesALostLease(t *testing.T) {
	main := testkit.RealRedis(t)
	for _, st := range lock.Strategies() {
		t.Run(st.Name, func(t *testing.T) {
			g := newGuardCase(t, main, st.Name)
			for _, lab := range []bool{false, true} {
				name := "public"
				if lab {
					name = "lab"
				}
				t.Run(name, func(t *testing.T) { g.run(t, lab) })
			}
		})
	}
}

// guardCase is one strategy's two lockers (A's and B's, as two processes
// would hold them) and how the lock is taken from A.
type guardCase struct {
	s      *stock.Store
	a, b   lock.Locker
	steal  func(t *testing.T, key string)
	fenced bool // the lock issues its own fencing token
}

func newGuardCase(t *testing.T, main *testkit.RedisServer, name string) *guardCase {
	t.Helper()
	g := &guardCase{s: stock.NewStore(main.Client, nil), fenced: name == "fenced" || name == "etcd"}
	backends := lock.Backends{Redis: main.Client}
	bBackends := backends
	g.steal = func(t *testing.T, key string) { // the lease expired
		if err := main.Client.Del(context.Background(), key).Err(); err != nil {
			t.Fatal(err)
		}
	}
	switch name {
	case "none", "local":
		g.steal = func(*testing.T, string) {} // nothing excludes B from A's section
	case "redlock":
		nodes := testkit.RedisClients(testkit.RedisNodes(t, 3))
		backends.Nodes, bBackends.Nodes = nodes, nodes
		g.steal = func(t *testing.T, key string) {
			for _, n := range nodes {
				if err := n.Del(context.Background(), key).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	case "mysql":
		if os.Getenv("MYSQL_DSN") == "" {
			testkit.Skip(t, testkit.NoMySQL, "MYSQL_DSN is unset: the test kills the holder's session by its id in the process list, which go-mysql-server does not keep as MySQL does")
		}
		// A and B on databases of their own, so that A's sessions are the
		// ones in A's database; GET_LOCK's names are server-wide.
		aDSN, bDSN := testkit.NewMySQL(t), testkit.NewMySQL(t)
		aDB := testkit.OpenMySQL(t, aDSN)
		backends.SQL, backends.SQLDialect = aDB, "mysql"
		bBackends.SQL, bBackends.SQLDialect = testkit.OpenMySQL(t, bDSN), "mysql"
		admin := testkit.OpenMySQL(t, bDSN)
		g.steal = func(t *testing.T, _ string) { killSessions(t, admin, aDB) } // the holder's session died
	case "etcd":
		cli := testkit.EtcdClient(t)
		backends.Etcd, bBackends.Etcd = testkit.ConnectEtcd(cli), testkit.ConnectEtcd(cli)
		g.steal = func(t *testing.T, key string) {
			if _, err := cli.Delete(context.Background(), lock.EtcdPrefix+key+"/", clientv3.WithPrefix()); err != nil {
				t.Fatal(err)
			}
		}
	}
	g.a, g.b = newGuardLocker(t, name, backends), newGuardLocker(t, name, bBackends)
	return g
}

func newGuardLocker(t *testing.T, name string, b lock.Backends) lock.Locker {
	t.Helper()
	l, err := lock.New(name, b)
	if err != nil {
		t.Fatalf("lock %s: %v", name, err)
	}
	if c, ok := l.(io.Closer); ok {
		t.Cleanup(func() { c.Close() })
	}
	return l
}

// killSessions kills every session of db's database but the admin's own.
func killSessions(t *testing.T, admin, db *sql.DB) {
	t.Helper()
	ctx := context.Background()
	var name string
	if err := db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	rows, err := admin.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ?", name)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		t.Fatal(err)
	}
	if len(ids) == 0 {
		t.Fatalf("no session of database %s to kill", name)
	}
	for _, id := range ids {
		if _, err := admin.ExecContext(ctx, "KILL ?", id); err != nil {
			t.Fatalf("KILL %d: %v", id, err)
		}
	}
}

func (g *guardCase) run(t *testing.T, lab bool) {
	ctx := t.Context()
	const units = 5
	p := stock.Product{Layout: stock.Layout{ID: testenv.ProductID(t), Shards: 1, Epoch: 1}, Where: stock.InRedis, Guarded: !lab}
	if err := g.s.LayOut(ctx, p, []int{units}, units); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.s.Drop(context.Background(), p.Layout) })
	// A TTL no step of the test outlives, so that only the steal ends A's
	// lease (and the watchdog's renewal does not run before A writes).
	opt := lock.Options{TTL: 10 * time.Second}
	var errB error
	a := stock.Request{Product: p, Ticket: ticket(1), Taker: stock.RMW{Locked: stock.Locked{Locker: g.a, Lock: opt}}}
	a.Hooks = &stock.Hooks{Inside: func(context.Context) error {
		g.steal(t, p.LockKey(0))
		b := stock.Request{Product: p, Ticket: ticket(2), Taker: stock.RMW{Locked: stock.Locked{Locker: g.b,
			Lock: lock.Options{TTL: opt.TTL, Wait: 5 * time.Second}}}}
		_, errB = g.s.Take(ctx, b)
		return nil
	}}
	_, errA := g.s.Take(ctx, a)
	if errB != nil {
		t.Fatalf("B, inside A's section: %v", errB)
	}
	levels, err := g.s.Ledgers().Levels(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := g.s.Ledgers().Ledger(ctx, p.Layout)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("A: %v; %d units left, %d takes", errA, levels[0], len(ledger))
	if lab && !g.fenced {
		// The lesson the lab keeps: the lease alone let A write.
		if errA != nil || levels[0]+len(ledger) != units+1 {
			t.Errorf("lab product: A %v, %d left and %d takes; want A's stale write to land, one unit sold twice", errA, levels[0], len(ledger))
		}
		return
	}
	if !errors.Is(errA, stock.ErrLeaseLost) {
		t.Errorf("A wrote after losing its lock: %v, want ErrLeaseLost", errA)
	}
	if levels[0] != units-1 || len(ledger) != 1 {
		t.Errorf("%d units left and %d takes, want %d and B's one", levels[0], len(ledger), units-1)
	}
}
