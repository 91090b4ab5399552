package order_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"seckill/internal/api"
	"seckill/internal/catalogue"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/reconcile"
	"seckill/internal/stock"
	"seckill/internal/testkit/testenv"
)

// fixture is a testenv.Sale, its parts named as the tests here name them.
type fixture struct {
	*testenv.Sale
	t   *testing.T
	svc *order.Service
	rdb *redis.Client
	db  *gorm.DB
	mr  *miniredis.Miniredis
}

func newFixture(t *testing.T, opt order.Options) *fixture {
	t.Helper()
	s := testenv.NewSale(t, opt, reconcile.Options{})
	return &fixture{Sale: s, t: t, svc: s.Svc, rdb: s.RDB, db: s.DB, mr: s.MR}
}

// TestCloseWaitsForPurchasesInFlight: a purchase that has taken its unit
// must end, in an order or back in the store, before the backends close.
func TestCloseWaitsForPurchasesInFlight(t *testing.T) {
	f := newFixture(t, order.Options{})
	p := f.Reset(catalogue.ProductSpec{ID: 1, Stock: 1, Shards: 1, Lock: "token", Lab: true})
	done := make(chan error, 1)
	go func() {
		_, _, err := f.svc.Buy(context.Background(), order.Purchase{UserID: 1, ProductID: 1,
			Lab: order.LabOptions{Faults: order.Faults{Hold: 300 * time.Millisecond}}})
		done <- err
	}()
	lockKey := stock.Layout{ID: p.ID, Shards: p.Shards, Epoch: p.Epoch}.LockKey(0)
	testenv.WaitFor(t, "the purchase taking the lock", func() bool { return f.mr.Exists(lockKey) })
	if err := f.svc.Close(); err != nil {
		t.Fatal(err)
	}
	// When Close returns, the unit is in an order: the backends may close.
	var orders int64
	if err := f.db.Model(&order.Order{}).Where("product_id = 1 AND buyer IS NOT NULL").Count(&orders).Error; err != nil || orders != 1 {
		t.Fatalf("%d orders when Close returned (%v): want the purchase in flight written", orders, err)
	}
	if err := <-done; err != nil {
		t.Errorf("the purchase in flight: %v, want it completed", err)
	}
	if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 2, ProductID: 1}); !errors.Is(err, order.ErrClosing) {
		t.Errorf("a purchase after Close: %v, want ErrClosing", err)
	}
}

// The teaching knobs are for lab products: anywhere else they are refused
// before anything is taken.
func TestLabOptionsOnlyOnLabProducts(t *testing.T) {
	f := newFixture(t, order.Options{})
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: 10})
	f.Reset(catalogue.ProductSpec{ID: 2, Stock: 10, Lab: true})
	for _, lab := range []order.LabOptions{
		{Lock: "none"}, {Mode: "lua"}, {Faults: order.Faults{Hold: time.Millisecond}},
		{Faults: order.Faults{Abandon: true}}, {Faults: order.Faults{Lock: lock.Fault{ClockSkew: time.Second}}},
	} {
		if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: 1, Lab: lab}); !errors.Is(err, order.ErrLabOnly) {
			t.Errorf("%+v on a product that is not a lab product: %v, want ErrLabOnly", lab, err)
		}
	}
	if a := f.Audit(1); a.Remaining != 10 || a.Orders != 0 {
		t.Errorf("audit after the refusals: %+v", a)
	}
	if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: 2, Lab: order.LabOptions{Lock: "none", Faults: order.Faults{Hold: time.Millisecond}}}); err != nil {
		t.Errorf("the same options on a lab product: %v", err)
	}
	// A product's lab flag is fixed when it is created.
	if _, err := f.svc.Catalogue().Reset(t.Context(), catalogue.ProductSpec{ID: 1, Stock: 10, Lab: true}); !errors.Is(err, order.ErrInvalid) {
		t.Errorf("turning a product into a lab product: %v, want ErrInvalid", err)
	}
}

// A purchase retried with the same key gets the first one's order, in every
// mode; another purchase of the same buyer is told which order it has.
func TestSameKeySameOrder(t *testing.T) {
	for _, mode := range []string{"rmw", "lua", "db"} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t, order.Options{})
			f.Reset(catalogue.ProductSpec{ID: 1, Stock: 5, Mode: mode})
			in := order.Purchase{UserID: 7, ProductID: 1, Key: "client-key-1"}
			first, rc1, err := f.svc.Buy(t.Context(), in)
			if err != nil {
				t.Fatal(err)
			}
			again, rc2, err := f.svc.Buy(t.Context(), in)
			if err != nil {
				t.Fatalf("the retry: %v", err)
			}
			if again.ID != first.ID || !rc2.Replayed || rc1.Replayed {
				t.Errorf("retry: order %s (replayed %v), want %s (replayed)", again.ID, rc2.Replayed, first.ID)
			}
			_, _, err = f.svc.Buy(t.Context(), order.Purchase{UserID: 7, ProductID: 1, Key: "client-key-2"})
			var before *stock.TakenBefore
			if !errors.As(err, &before) || before.Prior.Order != first.ID {
				t.Errorf("another purchase of the buyer: %v, want already bought with order %s", err, first.ID)
			}
			if a := f.Audit(1); a.Orders != 1 || a.Remaining != 4 || a.Verdict != api.VerdictOK {
				t.Errorf("audit %+v: want one order, 4 left, OK", a)
			}
		})
	}
}

// A client retries a purchase that took the last unit (its answer was lost
// on the way back): the product is sold out by then, and the sold-out flag
// answers before any ledger is read. The retry must still get its order.
func TestRetryAfterSoldOutGetsItsOrder(t *testing.T) {
	for _, mode := range []string{"rmw", "lua", "async"} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t, order.Options{})
			// Lab: a non-lab async product needs a Redis that persists.
			f.Reset(catalogue.ProductSpec{ID: 1, Stock: 1, Mode: mode, Lab: mode == "async"})
			in := order.Purchase{UserID: 7, ProductID: 1, Key: "client-key-1"}
			first, _, err := f.svc.Buy(t.Context(), in)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 8, ProductID: 1}); !errors.Is(err, stock.ErrSoldOut) {
				t.Fatalf("another buyer: %v, want sold out", err)
			}
			again, rc, err := f.svc.Buy(t.Context(), in)
			if err != nil || again.ID != first.ID || !rc.Replayed {
				t.Errorf("the retry after the sell-out: order %s (replayed %v), %v; want %s, replayed", again.ID, rc.Replayed, err, first.ID)
			}
			_, _, err = f.svc.Buy(t.Context(), order.Purchase{UserID: 7, ProductID: 1, Key: "client-key-2"})
			var before *stock.TakenBefore
			if !errors.As(err, &before) || before.Prior.Order != first.ID {
				t.Errorf("another purchase of the buyer with a key: %v, want already bought with order %s", err, first.ID)
			}
			if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 7, ProductID: 1}); !errors.Is(err, stock.ErrSoldOut) {
				t.Errorf("the buyer without a key: %v, want sold out (only retries read the ledgers)", err)
			}
		})
	}
}

// The reentrant lock through the API: the purchase owns its lock by its key,
// so a retry of a purchase whose first attempt still holds the shard's lock
// enters at once and returns that attempt's order, while another buyer
// waits for the lock.
func TestReentrantRetryEntersItsOwnLock(t *testing.T) {
	f := newFixture(t, order.Options{LockWait: 5 * time.Second})
	p := f.Reset(catalogue.ProductSpec{ID: 1, Stock: 5, Shards: 1, Lock: "reentrant", Lab: true})
	lockKey := stock.Layout{ID: p.ID, Shards: p.Shards, Epoch: p.Epoch}.LockKey(0)
	hold := order.LabOptions{Faults: order.Faults{Hold: 500 * time.Millisecond}}
	first := make(chan order.Order, 1)
	go func() {
		o, _, err := f.svc.Buy(context.Background(), order.Purchase{UserID: 1, ProductID: 1, Key: "k1", Lab: hold})
		if err != nil {
			t.Error(err)
		}
		first <- o
	}()
	testenv.WaitFor(t, "the first attempt taking the lock", func() bool { return f.mr.Exists(lockKey) })
	start := time.Now()
	retry, rc, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: 1, Key: "k1"})
	entered := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if rc.LockWait > 100*time.Millisecond {
		t.Errorf("the retry waited %s for a lock its own purchase holds", rc.LockWait)
	}
	o := <-first
	if retry.ID != o.ID {
		t.Errorf("the retry's order %s, want the first attempt's %s", retry.ID, o.ID)
	}
	// Another buyer, another owner: waits for the holder.
	go func() {
		_, _, _ = f.svc.Buy(context.Background(), order.Purchase{UserID: 2, ProductID: 1, Key: "k2", Lab: hold})
	}()
	testenv.WaitFor(t, "buyer 2 taking the lock", func() bool { return f.mr.Exists(lockKey) })
	_, rc, err = f.svc.Buy(t.Context(), order.Purchase{UserID: 3, ProductID: 1, Key: "k3"})
	if err != nil {
		t.Fatal(err)
	}
	if rc.LockWait < 200*time.Millisecond {
		t.Errorf("buyer 3 waited %s (the retry entered after %s): want it to wait for buyer 2's hold", rc.LockWait, entered)
	}
}

// A reset starts a new sale: the orders stay in the sale they were made in,
// and a purchase in flight across the reset lands in one sale, not in the
// new sale's stock as a lost unit.
func TestResetMidPurchase(t *testing.T) {
	f := newFixture(t, order.Options{})
	spec := catalogue.ProductSpec{ID: 1, Stock: 3, Shards: 1, Lock: "token", Lab: true}
	p := f.Reset(spec)
	if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: 1}); err != nil {
		t.Fatal(err)
	}
	lockKey := stock.Layout{ID: p.ID, Shards: p.Shards, Epoch: p.Epoch}.LockKey(0)
	done := make(chan order.Order, 1)
	go func() {
		o, _, err := f.svc.Buy(context.Background(), order.Purchase{UserID: 2, ProductID: 1, Lab: order.LabOptions{Faults: order.Faults{Hold: 300 * time.Millisecond}}})
		if err != nil {
			t.Error(err)
		}
		done <- o
	}()
	testenv.WaitFor(t, "the purchase taking the lock", func() bool { return f.mr.Exists(lockKey) })
	next := f.Reset(spec)
	o := <-done
	if next.Sale != p.Sale+1 {
		t.Fatalf("sale %d after the reset, want %d", next.Sale, p.Sale+1)
	}
	if o.Sale != next.Sale {
		t.Errorf("the purchase across the reset is in sale %d, want the new sale %d", o.Sale, next.Sale)
	}
	if a := f.Audit(1); a.Initial != 3 || a.Orders != 1 || a.Remaining != 2 || a.Verdict != api.VerdictOK {
		t.Errorf("the new sale's audit %+v: want 1 order, 2 left, OK", a)
	}
	var kept int64
	f.db.Model(&order.Order{}).Where("product_id = 1 AND sale = ? AND buyer IS NOT NULL", p.Sale).Count(&kept)
	if kept != 1 {
		t.Errorf("%d orders of the first sale remain, want 1", kept)
	}
}

// A reset or a rebuild that lands between a purchase's take and its INSERT
// gives the product a new layout: the INSERT, conditional on the layout the
// unit was taken from, is refused, and the purchase takes again from the new
// one. Were the late INSERT written, a reset would sell the new sale's unit
// in the old sale, and a rebuild (which counted the orders before it) would
// lay the unit out again beside its order: one unit sold twice.
func TestLateInsertAfterANewLayoutIsRefused(t *testing.T) {
	for _, change := range []string{"reset", "rebuild"} {
		for _, mode := range []string{"lua", "rmw"} {
			t.Run(change+"/"+mode, func(t *testing.T) {
				f := newFixture(t, order.Options{})
				spec := catalogue.ProductSpec{ID: 1, Stock: 3, Shards: 1, Mode: mode}
				p := f.Reset(spec)
				var changed atomic.Bool
				// Before the order's INSERT is sent, once: the take is done.
				err := f.db.Callback().Raw().Before("gorm:raw").Register("test:between-take-and-insert", func(db *gorm.DB) {
					if !strings.HasPrefix(db.Statement.SQL.String(), "INSERT INTO orders") || changed.Swap(true) {
						return
					}
					if change == "reset" {
						f.Reset(spec)
						return
					}
					if done, err := f.svc.Catalogue().Rebuild(context.Background(), p.ID, p.Epoch); err != nil || !done {
						t.Errorf("rebuild between the take and the INSERT: %v, %v", done, err)
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				o, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: 1})
				if err != nil {
					t.Fatal(err)
				}
				if !changed.Load() {
					t.Fatal("no INSERT was sent")
				}
				now, err := f.svc.Catalogue().Product(t.Context(), 1)
				if err != nil {
					t.Fatal(err)
				}
				if now.Epoch == p.Epoch || o.Sale != now.Sale {
					t.Errorf("order in sale %d, product at epoch %d (sale %d) after epoch %d: want the order in the new layout's sale", o.Sale, now.Epoch, now.Sale, p.Epoch)
				}
				if a := f.Audit(1); a.Orders != 1 || a.Remaining != 2 || a.Verdict != api.VerdictOK {
					t.Errorf("audit %+v: want the one order counted once, 2 left, OK", a)
				}
			})
		}
	}
}

// The db modes' take is an UPDATE of a shard row in the order's own
// transaction, and a reset rewrites the shard rows first: once the take has
// run, the reset waits for the COMMIT. What it cannot fence is a purchase
// that read the product's layout before the reset and takes after it: the
// take lands on the new sale's rows, and only the INSERT, conditional on the
// epoch the purchase read, tells it so. Here the buyer's process reads the
// product (its cache is empty), and another process resets it before the
// purchase's transaction begins. The INSERT is refused, the transaction
// rolls back, and the purchase sells from the new layout: its order is a
// row of the new sale and the audit is exact. Were the refused INSERT
// committed, the new sale would lose a unit to an order that has no row,
// told to the buyer as sold.
func TestDBInsertAfterAResetIsRefused(t *testing.T) {
	for _, tc := range []struct{ mode, lock string }{{api.ModeDB, "none"}, {api.ModeSQLRMW, "token"}} {
		t.Run(tc.mode, func(t *testing.T) {
			f := newFixture(t, order.Options{})
			spec := catalogue.ProductSpec{ID: 1, Stock: 3, Shards: 1, Mode: tc.mode, Lock: tc.lock}
			p := f.Reset(spec)
			// The buyer's process: the same database and Redis, nothing cached.
			locks, err := lock.OpenPool(t.Context(), lock.PoolConfig{Redis: f.rdb})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { locks.Close() })
			buyer, _ := testenv.Orders(t, f.db, f.rdb, locks, order.Options{LockWait: time.Second}, reconcile.Options{})

			var armed, reset atomic.Bool
			var refused, inserts atomic.Int64
			err = f.db.Callback().Query().After("gorm:query").Register("test:reset-after-the-read", func(db *gorm.DB) {
				if db.Statement.Table != "products" || !armed.Load() || reset.Swap(true) {
					return
				}
				f.Reset(spec) // another process; the buyer's holds the old layout
			})
			if err != nil {
				t.Fatal(err)
			}
			err = f.db.Callback().Raw().After("gorm:raw").Register("test:count-inserts", func(db *gorm.DB) {
				if strings.HasPrefix(db.Statement.SQL.String(), "INSERT INTO orders") && db.Error == nil {
					inserts.Add(1)
					if db.RowsAffected == 0 {
						refused.Add(1)
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			armed.Store(true)
			o, _, err := buyer.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: 1})
			if err != nil {
				t.Fatal(err)
			}
			if !reset.Load() {
				t.Fatal("the buyer's process did not read the product: no reset came between its read and its take")
			}
			if refused.Load() != 1 || inserts.Load() != 2 {
				t.Errorf("%d INSERTs, %d refused: want the one from the old layout refused and one from the new", inserts.Load(), refused.Load())
			}
			now, err := f.svc.Catalogue().Refresh(t.Context(), 1)
			if err != nil {
				t.Fatal(err)
			}
			if now.Epoch == p.Epoch || o.Sale != now.Sale {
				t.Errorf("told order %s in sale %d; the product is at epoch %d (sale %d) after epoch %d: want the order in the new sale", o.ID, o.Sale, now.Epoch, now.Sale, p.Epoch)
			}
			var rows int64
			if err := f.db.Model(&order.Order{}).Where("id = ?", int64(o.ID)).Count(&rows).Error; err != nil || rows != 1 {
				t.Errorf("order %s, told to the buyer: %d rows (%v), want 1", o.ID, rows, err)
			}
			if a := f.Audit(1); a.Orders != 1 || a.Remaining != 2 || a.Verdict != api.VerdictOK {
				t.Errorf("the new sale's audit %+v: want 1 order, 2 left, OK", a)
			}
		})
	}
}

// When Redis loses the stock, purchases are told the stock is being rebuilt,
// never "sold out"; the rebuild lays it out again from the orders, with the
// buyers, so the audit is exact and nobody buys twice.
func TestRebuildAfterRedisLostTheStock(t *testing.T) {
	for _, mode := range []string{"rmw", "lua"} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t, order.Options{})
			f.Reset(catalogue.ProductSpec{ID: 1, Stock: 10, Shards: 3, Mode: mode})
			for u := int64(1); u <= 4; u++ {
				if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: u, ProductID: 1}); err != nil {
					t.Fatal(err)
				}
			}
			f.mr.FlushAll() // Redis restarted empty
			_, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 5, ProductID: 1})
			if !errors.Is(err, order.ErrRebuilding) {
				t.Fatalf("a purchase after Redis lost the stock: %v, want ErrRebuilding", err)
			}
			var a reconcile.Audit
			testenv.WaitFor(t, "the rebuild", func() bool {
				_, got, err := f.Rec.Audit(t.Context(), 1)
				a = got
				return err == nil
			})
			if a.Orders != 4 || a.Remaining != 6 || a.Taken != 4 || a.Verdict != api.VerdictOK {
				t.Fatalf("audit after the rebuild %+v: want 4 orders, 6 left, OK", a)
			}
			_, _, err = f.svc.Buy(t.Context(), order.Purchase{UserID: 2, ProductID: 1})
			if !errors.Is(err, stock.ErrAlreadyBought) {
				t.Errorf("buyer 2 again after the rebuild: %v, want already bought", err)
			}
			if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 5, ProductID: 1}); err != nil {
				t.Errorf("buyer 5 after the rebuild: %v", err)
			}
		})
	}
}

// A process started on a fresh database beside a Redis that holds the
// product's layout does not lay its stock out again.
func TestCreateIfAbsentLeavesAForeignLayout(t *testing.T) {
	f := newFixture(t, order.Options{})
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: 10, Shards: 2})
	if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: 1}); err != nil {
		t.Fatal(err)
	}
	before := f.mr.Keys()
	// Another database, the same Redis.
	_, db2, _ := testenv.Local(t)
	locks, _ := lock.OpenPool(t.Context(), lock.PoolConfig{Redis: f.rdb})
	t.Cleanup(func() { locks.Close() })
	svc2, err := order.NewService(db2, f.rdb, locks, order.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc2.Close() })
	if _, err := svc2.Catalogue().CreateIfAbsent(t.Context(), catalogue.ProductSpec{ID: 1, Stock: 100}); !errors.Is(err, catalogue.ErrExists) {
		t.Fatalf("CreateIfAbsent beside a live layout: %v, want catalogue.ErrExists", err)
	}
	if a := f.Audit(1); a.Remaining != 9 || a.Orders != 1 {
		t.Errorf("the sale after the second process started: %+v", a)
	}
	if after := f.mr.Keys(); len(after) != len(before) {
		t.Errorf("keys %v became %v", before, after)
	}
}

// Another part's job registered through Enter (a reconciler's pass, a
// repair, a rebuild) is work in flight: Close waits for it, and once Close
// began no job enters (ErrClosing), so none runs on closed backends.
func TestCloseWaitsForJobsThatEntered(t *testing.T) {
	f := newFixture(t, order.Options{})
	done, err := f.svc.Enter()
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		f.svc.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a job that entered was still running")
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := f.svc.Enter(); !errors.Is(err, order.ErrClosing) {
		t.Errorf("Enter once Close began: %v, want ErrClosing", err)
	}
	if _, err := f.Rec.Reconcile(t.Context(), 1); !errors.Is(err, order.ErrClosing) {
		t.Errorf("a reconciler's pass once Close began: %v, want ErrClosing", err)
	}
	done()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return once the job ended")
	}
}
