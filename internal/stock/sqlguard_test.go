package stock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"gorm.io/gorm"

	"seckill/internal/app"
	"seckill/internal/lock"
	"seckill/internal/stock"
	"seckill/internal/testkit/testenv"
)

// TestSQLRMWGuardRefusesALostLease: in the sqlrmw mode, purchase A reads the
// shard in its transaction, its lock is taken from it (its lease expired
// while it was paused), and B then C each take the lock, take a unit and
// commit; then A writes the value it read minus one. On a product that is
// not a lab product A's UPDATE requires the value it read, finds another,
// and A is refused (ErrLeaseLost, its transaction rolled back): the stock
// counts B's and C's takes only. On a lab product A's absolute write lands
// over theirs: two units sold twice. Two takes, not one: after one, A's
// write would set the row to the value it already holds, which MySQL
// reports as no row changed, and an unguarded write would pass for a
// refused one.
//
// On SQLite, always run, A, B and C are one transaction (one writer at a
// time): B's and C's takes run in A's, where A's UPDATE sees them as it
// would committed ones. With MYSQL_DSN, also on MySQL: three transactions,
// at READ COMMITTED (the service's) and at REPEATABLE READ, whose SELECT
// reads a snapshot but whose UPDATE reads the latest committed row.
func TestSQLRMWGuardRefusesALostLease(t *testing.T) {
	type backend struct {
		name string
		iso  sql.IsolationLevel
		sql  func(*app.Config) // the database the case runs on
	}
	backends := []backend{{name: "sqlite", iso: sql.LevelDefault, sql: func(c *app.Config) { c.MySQLDSN = "" }}}
	if os.Getenv("MYSQL_DSN") != "" {
		for _, iso := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead} {
			backends = append(backends, backend{name: "mysql/" + iso.String(), iso: iso, sql: func(*app.Config) {}})
		}
	}
	for _, b := range backends {
		for _, lab := range []bool{false, true} {
			name := b.name + "/public"
			if lab {
				name = b.name + "/lab"
			}
			t.Run(name, func(t *testing.T) {
				cfg := testenv.Config(t)
				b.sql(&cfg)
				sqlGuardCase(t, cfg, b.iso, lab)
			})
		}
	}
}

func sqlGuardCase(t *testing.T, cfg app.Config, iso sql.IsolationLevel, lab bool) {
	ctx := t.Context()
	a, err := app.Open(ctx, cfg, nil, app.Extras{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	db, mysql := a.DB(), a.DB().Dialector.Name() == "mysql"
	s := stock.NewStore(a.Redis(), db)
	const units = 5
	p := stock.Product{Layout: stock.Layout{ID: testenv.ProductID(t), Shards: 1, Epoch: 1}, Where: stock.InSQL, Guarded: !lab}
	if err := stock.LayOutSQL(db, p, []int{units}); err != nil {
		t.Fatal(err)
	}
	locker, err := lock.New("token", lock.Backends{Redis: a.Redis()})
	if err != nil {
		t.Fatal(err)
	}
	begin := func() *gorm.DB {
		t.Helper()
		var opts []*sql.TxOptions
		if mysql {
			opts = append(opts, &sql.TxOptions{Isolation: iso})
		}
		tx := db.WithContext(ctx).Begin(opts...)
		if tx.Error != nil {
			t.Fatal(tx.Error)
		}
		return tx
	}
	level := func(tx *gorm.DB) int {
		t.Helper()
		var n int
		if err := tx.Raw("SELECT stock FROM product_shards WHERE product_id = ? AND shard = 0", p.ID).Row().Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// A TTL no step of the test outlives: only the steal ends A's lease.
	opt := lock.Options{TTL: 10 * time.Second}
	txA := begin()
	defer txA.Rollback()
	const inside = 2 // B and C
	reqA := stock.Request{Product: p, Ticket: ticket(1), Taker: stock.SQLRMW{Tx: txA, Locked: stock.Locked{Locker: locker, Lock: opt}}}
	reqA.Hooks = &stock.Hooks{Inside: func(context.Context) error {
		if err := a.Redis().Del(ctx, p.LockKey(0)).Err(); err != nil { // A's lease expired
			t.Fatal(err)
		}
		for user := int64(2); user <= 1+inside; user++ {
			txB := txA // SQLite's one writer: B's and C's writes are in A's transaction
			if mysql {
				txB = begin()
			}
			reqB := stock.Request{Product: p, Ticket: ticket(user), Taker: stock.SQLRMW{Tx: txB, Locked: stock.Locked{Locker: locker,
				Lock: lock.Options{TTL: opt.TTL, Wait: 5 * time.Second}}}}
			takenB, errB := s.Take(ctx, reqB)
			if mysql {
				if errB == nil {
					errB = txB.Commit().Error
				} else {
					txB.Rollback()
				}
			}
			if _, err := takenB.Held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if errB != nil {
				return fmt.Errorf("user %d, inside A's section: %w", user, errB)
			}
		}
		return nil
	}}
	takenA, errA := s.Take(ctx, reqA)
	if _, err := takenA.Held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if errA != nil && !errors.Is(errA, stock.ErrLeaseLost) {
		t.Fatalf("A: %v", errA)
	}
	takes := inside
	if errA == nil {
		takes++
	}
	// What A's transaction would commit: on SQLite B's and C's takes are in it.
	left := level(txA)
	if errA == nil {
		if err := txA.Commit().Error; err != nil {
			t.Fatal(err)
		}
	} else {
		txA.Rollback() // as the order's transaction is on any error
	}
	if mysql {
		left = level(db.WithContext(ctx))
	}
	t.Logf("A: %v; %d units left, %d takes", errA, left, takes)
	if lab {
		// The lesson the lab keeps: the absolute write lands over B's and C's.
		if errA != nil || left+takes != units+inside {
			t.Errorf("lab product: A %v, %d left and %d takes; want A's stale write to land, %d units sold twice", errA, left, takes, inside)
		}
		return
	}
	if !errors.Is(errA, stock.ErrLeaseLost) {
		t.Errorf("A wrote after another holder's write: %v, want ErrLeaseLost", errA)
	}
	if left != units-inside || takes != inside {
		t.Errorf("%d units left and %d takes, want %d and B's and C's", left, takes, units-inside)
	}
}
