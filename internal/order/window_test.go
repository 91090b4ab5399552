package order_test

import (
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"seckill/internal/admission"
	"seckill/internal/catalogue"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/reconcile"
	"seckill/internal/stock"
	"seckill/internal/testkit"
	"seckill/internal/testkit/testenv"
)

// clock is a settable clock for Options.Now.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := new(clock)
	c.set(t)
	return c
}

func (c *clock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }

// TestSaleWindow: before starts_at a purchase is refused with the opening
// and the service's clock, having cost no Redis command (the rate limit's
// key is not set, miniredis counts nothing); at starts_at it sells; from
// ends_at on it is refused, for lab and other products alike.
func TestSaleWindow(t *testing.T) {
	for _, lab := range []bool{false, true} {
		t.Run(map[bool]string{false: "sale", true: "lab"}[lab], func(t *testing.T) {
			opens := time.Date(2030, 5, 1, 10, 0, 0, 0, time.UTC)
			ends := opens.Add(time.Hour)
			clk := newClock(opens.Add(-1500 * time.Millisecond))
			limit := new(lateLimit)
			f := newFixture(t, order.Options{Now: clk.now, DueEvery: -1, Admit: limit})
			limit.PerBuyer = admission.NewPerBuyer(f.rdb, time.Minute)
			f.Reset(catalogue.ProductSpec{ID: 1, Stock: 5, Shards: 1, Lab: lab, StartsAt: &opens, EndsAt: &ends})

			before := f.mr.CommandCount()
			_, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 7, ProductID: 1})
			var early *order.NotStartedError
			if !errors.As(err, &early) || !errors.Is(err, order.ErrNotStarted) {
				t.Fatalf("a purchase 1.5 s before the opening: %v, want a *NotStartedError", err)
			}
			if !early.StartsAt.Equal(opens) || !early.Now.Equal(clk.now()) {
				t.Errorf("refusal says starts %s, now %s; want %s and %s", early.StartsAt, early.Now, opens, clk.now())
			}
			if n := f.mr.CommandCount() - before; n != 0 {
				t.Errorf("the refusal sent %d commands to Redis, want none", n)
			}
			if f.mr.Exists(admission.PerBuyerKey(7, 1)) {
				t.Error("the refused buyer's rate-limit key is set: the window is checked after the rate limit")
			}

			clk.set(opens)
			if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 7, ProductID: 1}); err != nil {
				t.Fatalf("a purchase at the opening: %v, want it sold", err)
			}
			clk.set(ends)
			if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 8, ProductID: 1}); !errors.Is(err, order.ErrSaleEnded) {
				t.Fatalf("a purchase at ends_at: %v, want ErrSaleEnded", err)
			}
			if a := f.Audit(1); a.Orders != 1 {
				t.Errorf("%d orders, want the one sold in the window", a.Orders)
			}
		})
	}
}

// lateLimit is the rate limit on the fixture's Redis, which exists only
// once the fixture does.
type lateLimit struct{ *admission.PerBuyer }

// TestResetChangesTheWindow: a POST of an existing product that is not a
// lab product may move its window without the explicit reset, and the
// purchases follow the new window at once.
func TestResetChangesTheWindow(t *testing.T) {
	clk := newClock(time.Date(2030, 5, 1, 10, 0, 0, 0, time.UTC))
	f := newFixture(t, order.Options{Now: clk.now, DueEvery: -1})
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: 5, Shards: 1})
	later := clk.now().Add(time.Minute)
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: 5, Shards: 1, StartsAt: &later})
	if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: 1}); !errors.Is(err, order.ErrNotStarted) {
		t.Fatalf("after the window moved a minute ahead: %v, want ErrNotStarted", err)
	}
	clk.add(time.Minute)
	if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: 1}); err != nil {
		t.Fatalf("at the new opening: %v", err)
	}
}

// TestBadWindowsAreInvalid: a window that ends before it starts, or times a
// database cannot keep, are refused as the request's fault.
func TestBadWindowsAreInvalid(t *testing.T) {
	f := newFixture(t, order.Options{DueEvery: -1})
	at := time.Date(2030, 5, 1, 10, 0, 0, 0, time.UTC)
	early, before := at.Add(-time.Second), time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC)
	for name, w := range map[string][2]*time.Time{
		"ends at the start":  {&at, &at},
		"ends before starts": {&at, &early},
		"starts before 1970": {&before, nil},
		"ends before 1970":   {nil, &before},
	} {
		_, err := f.svc.Catalogue().Reset(t.Context(), catalogue.ProductSpec{ID: 1, Stock: 5, StartsAt: w[0], EndsAt: w[1]})
		if !errors.Is(err, order.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestMigrateAddsTheWindow: a products table from before the window gets
// its columns, on SQLite and on MySQL, and keeps its rows.
func TestMigrateAddsTheWindow(t *testing.T) {
	dbs := map[string]func(t *testing.T) gorm.Dialector{
		"sqlite": func(t *testing.T) gorm.Dialector { return sqlite.Open(testkit.MemorySQLite(t)) },
		"mysql": func(t *testing.T) gorm.Dialector {
			dsn := os.Getenv("MYSQL_DSN")
			if dsn == "" {
				testkit.Skip(t, testkit.NoMySQL, "MYSQL_DSN is unset")
			}
			return mysql.Open(testenv.Database(t, dsn))
		},
	}
	for name, open := range dbs {
		t.Run(name, func(t *testing.T) {
			db, err := gorm.Open(open(t), &gorm.Config{Logger: logger.Discard})
			if err != nil {
				t.Fatal(err)
			}
			sqlDB, _ := db.DB()
			if name == "sqlite" {
				sqlDB.SetMaxOpenConns(1) // one in-memory database lives on one connection
			}
			t.Cleanup(func() { sqlDB.Close() })
			// The table as it was: the product's, without the window.
			m := db.Migrator()
			if err := m.AutoMigrate(&catalogue.Product{}); err != nil {
				t.Fatal(err)
			}
			for _, col := range []string{"StartsAt", "EndsAt"} {
				if err := m.DropColumn(&catalogue.Product{}, col); err != nil || m.HasColumn(&catalogue.Product{}, col) {
					t.Fatalf("dropping %s to make the old table: %v", col, err)
				}
			}
			old := map[string]any{"id": 1, "name": "old", "initial": 5, "shards": 1, "lock": "token", "mode": "rmw",
				"fallback": true, "store": "redis", "updated_at": time.Now()}
			if err := db.Table("products").Create(old).Error; err != nil {
				t.Fatal(err)
			}
			if err := order.Migrate(t.Context(), db); err != nil {
				t.Fatal(err)
			}
			for _, col := range []string{"StartsAt", "EndsAt"} {
				if !m.HasColumn(&catalogue.Product{}, col) {
					t.Errorf("no column for %s after Migrate", col)
				}
			}
			var p catalogue.Product
			if err := db.Take(&p, 1).Error; err != nil || p.Name != "old" || p.StartsAt != nil || p.EndsAt != nil {
				t.Errorf("the old row: %+v, %v; want it kept, without a window", p, err)
			}
		})
	}
}

// TestResetWarmsAFutureSale: after SCRIPT FLUSH, a reset of a product that
// opens later leaves the purchase's scripts loaded; one on sale at once is
// not warmed (its first buyers would race the warm-up).
func TestResetWarmsAFutureSale(t *testing.T) {
	clk := newClock(time.Date(2030, 5, 1, 10, 0, 0, 0, time.UTC))
	f := newFixture(t, order.Options{Now: clk.now, DueEvery: -1})
	take := stock.TakeScript().Hash()
	loaded := func() bool {
		ok, err := f.rdb.ScriptExists(t.Context(), take).Result()
		if err != nil {
			t.Fatal(err)
		}
		return ok[0]
	}
	past, later := clk.now().Add(-time.Second), clk.now().Add(time.Minute)
	for _, tc := range []struct {
		name   string
		starts *time.Time
		warm   bool
	}{{"no window", nil, false}, {"opened", &past, false}, {"opens later", &later, true}} {
		if err := f.rdb.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		f.Reset(catalogue.ProductSpec{ID: 1, Stock: 5, Shards: 1, StartsAt: tc.starts})
		if got := loaded(); got != tc.warm {
			t.Errorf("%s: the take script loaded after the reset: %v, want %v", tc.name, got, tc.warm)
		}
	}
}

// TestResetClearsEveryProcessFlag: a reset in one process clears the
// sold-out flag another process set, and that process tells its gate:
// the reset's notice is the warm-up's part for the flags and the gate.
func TestResetClearsEveryProcessFlag(t *testing.T) {
	rdb, db, _ := testenv.Local(t)
	locks, err := lock.OpenPool(t.Context(), lock.PoolConfig{Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locks.Close() })
	var told atomic.Int64
	seller, _ := testenv.Orders(t, db, rdb, locks, order.Options{DueEvery: -1,
		StockBack: func(id int64) { told.Store(id) }}, reconcile.Options{})
	operator, _ := testenv.Orders(t, db, rdb, locks, order.Options{DueEvery: -1}, reconcile.Options{})
	if _, err := operator.Catalogue().Reset(t.Context(), catalogue.ProductSpec{ID: 1, Stock: 1, Shards: 1}); err != nil {
		t.Fatal(err)
	}
	for user := int64(1); user <= 2; user++ {
		seller.Buy(t.Context(), order.Purchase{UserID: user, ProductID: 1})
	}
	if !seller.Catalogue().SoldOut(1) {
		t.Fatal("the seller's flag is not set after the product sold out")
	}
	opens := time.Now().Add(time.Hour)
	if _, err := operator.Catalogue().Reset(t.Context(), catalogue.ProductSpec{ID: 1, Stock: 1, Shards: 1, StartsAt: &opens}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the seller's flag cleared and its gate told", func() bool {
		return !seller.Catalogue().SoldOut(1) && told.Load() == 1
	})
	if _, _, err := seller.Buy(t.Context(), order.Purchase{UserID: 3, ProductID: 1}); !errors.Is(err, order.ErrNotStarted) {
		t.Errorf("the seller after the reset: %v, want the new window's ErrNotStarted (its cached product dropped)", err)
	}
}
