package stock_test

import (
	"context"
	"database/sql"
	"errors"
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
// while it was paused), and B takes the lock, takes a unit and commits; then
// A writes the value it read minus one. On a product that is not a lab
// product A's UPDATE requires the value it read, finds B's, and A is refused
// (ErrLeaseLost, its transaction rolled back): the stock counts B's take
// only. On a lab product A's absolute write lands over B's: one unit sold
// twice. On MySQL A and B are two transactions, at READ COMMITTED (the
// service's) and at REPEATABLE READ, whose SELECT reads a snapshot but whose
// UPDATE reads the latest committed row. SQLite runs one writer at a time:
// B's take runs in A's transaction, where A's UPDATE sees it as it would
// see a committed one.
func TestSQLRMWGuardRefusesALostLease(t *testing.T) {
	levels := []sql.IsolationLevel{sql.LevelDefault}
	if os.Getenv("MYSQL_DSN") != "" {
		levels = []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead}
	}
	for _, iso := range levels {
		for _, lab := range []bool{false, true} {
			name := iso.String() + "/public"
			if lab {
				name = iso.String() + "/lab"
			}
			t.Run(name, func(t *testing.T) { sqlGuardCase(t, iso, lab) })
		}
	}
}

func sqlGuardCase(t *testing.T, iso sql.IsolationLevel, lab bool) {
	ctx := t.Context()
	a, err := app.Open(ctx, testenv.Config(t), nil, app.Extras{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	db, mysql := a.DB(), a.DB().Dialector.Name() == "mysql"
	s := stock.NewStore(a.Redis(), db)
	const units = 5
	p := stock.Product{Layout: stock.Layout{ID: testenv.ProductID(t), Shards: 1, Epoch: 1}, Where: stock.InSQL}
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
	var (
		errB   error
		takenB stock.Taken
	)
	reqA := stock.Request{Product: p, Ticket: ticket(1), Mode: stock.SQLRMW, Locker: locker, Lock: opt, Tx: txA, Guard: !lab}
	reqA.Hooks = &stock.Hooks{Inside: func(context.Context) error {
		if err := a.Redis().Del(ctx, p.LockKey(0)).Err(); err != nil { // A's lease expired
			t.Fatal(err)
		}
		txB := txA // SQLite's one writer: B's write is in A's transaction
		if mysql {
			txB = begin()
		}
		reqB := stock.Request{Product: p, Ticket: ticket(2), Mode: stock.SQLRMW, Locker: locker,
			Lock: lock.Options{TTL: opt.TTL, Wait: 5 * time.Second}, Tx: txB, Guard: !lab}
		takenB, errB = s.Take(ctx, reqB)
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
		return nil
	}}
	takenA, errA := s.Take(ctx, reqA)
	if _, err := takenA.Held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if errB != nil {
		t.Fatalf("B, inside A's section: %v", errB)
	}
	takes := 1 // B's
	if errA == nil {
		takes++
	}
	// What A's transaction would commit: on SQLite B's take is in it.
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
		// The lesson the lab keeps: the absolute write lands over B's.
		if errA != nil || left+takes != units+1 {
			t.Errorf("lab product: A %v, %d left and %d takes; want A's stale write to land, one unit sold twice", errA, left, takes)
		}
		return
	}
	if !errors.Is(errA, stock.ErrLeaseLost) {
		t.Errorf("A wrote after another holder's write: %v, want ErrLeaseLost", errA)
	}
	if left != units-1 || takes != 1 {
		t.Errorf("%d units left and %d takes, want %d and B's one", left, takes, units-1)
	}
}
