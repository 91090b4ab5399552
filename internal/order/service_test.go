package order_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"seckill/internal/api"
	"seckill/internal/catalogue"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/outbox"
	"seckill/internal/stock"
	"seckill/internal/testkit/testenv"
)

// fixture is a service on miniredis and an in-memory SQLite: what is tested
// here is the service's own bookkeeping. The real servers' part is in
// internal/server's and the fault tests.
type fixture struct {
	t   *testing.T
	svc *order.Service
	rdb *redis.Client
	db  *gorm.DB
	mr  *miniredis.Miniredis
}

func newFixture(t *testing.T, opt order.Options) *fixture {
	t.Helper()
	rdb, db, mr := testenv.Local(t)
	locks, err := lock.OpenPool(t.Context(), lock.PoolConfig{Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locks.Close() })
	if opt.LockWait == 0 {
		opt.LockWait = time.Second
	}
	if opt.ReconcileEvery == 0 {
		opt.ReconcileEvery = -1 // on demand only: the tests call Reconcile
	}
	svc, err := order.NewService(db, rdb, locks, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return &fixture{t: t, svc: svc, rdb: rdb, db: db, mr: mr}
}

func (f *fixture) reset(spec catalogue.ProductSpec) catalogue.Product {
	f.t.Helper()
	p, err := f.svc.Catalogue().Reset(f.t.Context(), spec)
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) audit(id int64) order.Audit {
	f.t.Helper()
	_, a, err := f.svc.Reconciler().Audit(f.t.Context(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

// waitFor polls cond until it holds, for at most 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s never happened", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCloseWaitsForPurchasesInFlight: a purchase that has taken its unit
// must end, in an order or back in the store, before the backends close.
func TestCloseWaitsForPurchasesInFlight(t *testing.T) {
	f := newFixture(t, order.Options{})
	p := f.reset(catalogue.ProductSpec{ID: 1, Stock: 1, Shards: 1, Lock: "token", Lab: true})
	done := make(chan error, 1)
	go func() {
		_, _, err := f.svc.Buy(context.Background(), order.Purchase{UserID: 1, ProductID: 1,
			Lab: order.LabOptions{Faults: order.Faults{Hold: 300 * time.Millisecond}}})
		done <- err
	}()
	lockKey := stock.Layout{ID: p.ID, Shards: p.Shards, Epoch: p.Epoch}.LockKey(0)
	waitFor(t, "the purchase taking the lock", func() bool { return f.mr.Exists(lockKey) })
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
	f.reset(catalogue.ProductSpec{ID: 1, Stock: 10})
	f.reset(catalogue.ProductSpec{ID: 2, Stock: 10, Lab: true})
	for _, lab := range []order.LabOptions{
		{Lock: "none"}, {Mode: "lua"}, {Faults: order.Faults{Hold: time.Millisecond}},
		{Faults: order.Faults{Abandon: true}}, {Faults: order.Faults{Lock: lock.Fault{ClockSkew: time.Second}}},
	} {
		if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: 1, Lab: lab}); !errors.Is(err, order.ErrLabOnly) {
			t.Errorf("%+v on a product that is not a lab product: %v, want ErrLabOnly", lab, err)
		}
	}
	if a := f.audit(1); a.Remaining != 10 || a.Orders != 0 {
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
			f.reset(catalogue.ProductSpec{ID: 1, Stock: 5, Mode: mode})
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
			if a := f.audit(1); a.Orders != 1 || a.Remaining != 4 || a.Verdict != api.VerdictOK {
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
			f.reset(catalogue.ProductSpec{ID: 1, Stock: 1, Mode: mode, Lab: mode == "async"})
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
	p := f.reset(catalogue.ProductSpec{ID: 1, Stock: 5, Shards: 1, Lock: "reentrant", Lab: true})
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
	waitFor(t, "the first attempt taking the lock", func() bool { return f.mr.Exists(lockKey) })
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
	waitFor(t, "buyer 2 taking the lock", func() bool { return f.mr.Exists(lockKey) })
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
	p := f.reset(spec)
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
	waitFor(t, "the purchase taking the lock", func() bool { return f.mr.Exists(lockKey) })
	next := f.reset(spec)
	o := <-done
	if next.Sale != p.Sale+1 {
		t.Fatalf("sale %d after the reset, want %d", next.Sale, p.Sale+1)
	}
	if o.Sale != next.Sale {
		t.Errorf("the purchase across the reset is in sale %d, want the new sale %d", o.Sale, next.Sale)
	}
	if a := f.audit(1); a.Initial != 3 || a.Orders != 1 || a.Remaining != 2 || a.Verdict != api.VerdictOK {
		t.Errorf("the new sale's audit %+v: want 1 order, 2 left, OK", a)
	}
	var kept int64
	f.db.Model(&order.Order{}).Where("product_id = 1 AND sale = ? AND buyer IS NOT NULL", p.Sale).Count(&kept)
	if kept != 1 {
		t.Errorf("%d orders of the first sale remain, want 1", kept)
	}
}

// When Redis loses the stock, purchases are told the stock is being rebuilt,
// never "sold out"; the rebuild lays it out again from the orders, with the
// buyers, so the audit is exact and nobody buys twice.
func TestRebuildAfterRedisLostTheStock(t *testing.T) {
	for _, mode := range []string{"rmw", "lua"} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t, order.Options{})
			f.reset(catalogue.ProductSpec{ID: 1, Stock: 10, Shards: 3, Mode: mode})
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
			var a order.Audit
			waitFor(t, "the rebuild", func() bool {
				_, got, err := f.svc.Reconciler().Audit(t.Context(), 1)
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

// A take whose purchase died before its order was written is stranded: the
// reconciler returns its unit after the grace period, and its buyer may buy
// again; a take younger than the grace period is left alone.
// TestReconcilerSeesABuyersSecondTake: on a Redis Cluster a buyer whose
// key's node failed mid-take may hold a take in each of two shards (the
// double window). The one without an order must be returned: read by buyer,
// the ledgers showed one take per buyer, the later shard's, and a CI run
// lost the unit of the other for good (TestRedisCluster, a master killed
// mid-burst: LOST 1).
func TestReconcilerSeesABuyersSecondTake(t *testing.T) {
	f := newFixture(t, order.Options{ReconcileGrace: time.Nanosecond})
	p := f.reset(catalogue.ProductSpec{ID: 1, Stock: 6, Shards: 2, Mode: "lua"})
	// Two buyers: the round robin puts one of them on shard 1.
	var real order.Order
	for user := int64(1); user <= 2; user++ {
		o, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: user, ProductID: 1})
		if err != nil {
			t.Fatal(err)
		}
		if o.Shard == 1 {
			real = o
		}
	}
	if real.ID == 0 {
		t.Fatal("neither purchase took from shard 1")
	}
	// Its second take, on shard 0 (read before shard 1), with no order: a
	// unit out of the stock and a record in the ledger, in one step as a
	// take does.
	l := stock.Layout{ID: 1, Shards: p.Shards, Epoch: p.Epoch}
	extra := stock.Entry{User: real.UserID, Order: 987654321, Key: "second", Shard: 0, At: time.Now().Add(-time.Minute)}
	if err := f.rdb.Decr(t.Context(), l.StockKey(0)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := stock.NewStore(f.rdb, f.db).Ledgers().Record(t.Context(), l, []stock.Entry{extra}); err != nil {
		t.Fatal(err)
	}
	if a := f.audit(1); a.Remaining != 3 || a.Orders != 2 {
		t.Fatalf("audit with the second take %+v: want 3 remaining, 2 orders", a)
	}
	r, err := f.svc.Reconciler().Reconcile(t.Context(), 1)
	if err != nil || r.Takes != 3 || r.Returned != 1 {
		t.Fatalf("pass: %+v, %v; want 3 takes seen and the second take's unit returned", r, err)
	}
	if a := f.audit(1); a.Remaining != 4 || a.Orders != 2 || a.Verdict != api.VerdictOK {
		t.Errorf("audit after the pass %+v: want 4 remaining, 2 orders, OK", a)
	}
}

func TestReconcilerReturnsStrandedUnits(t *testing.T) {
	f := newFixture(t, order.Options{ReconcileGrace: time.Hour})
	p := f.reset(catalogue.ProductSpec{ID: 1, Stock: 5, Shards: 2, Mode: "lua"})
	if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: 1}); err != nil {
		t.Fatal(err)
	}
	// A process took a unit for buyer 2 and died before its INSERT.
	store := stock.NewStore(f.rdb, f.db)
	sp := stock.Product{Layout: stock.Layout{ID: 1, Shards: p.Shards, Epoch: p.Epoch}, Where: stock.InRedis, Fallback: true}
	if _, err := store.Take(t.Context(), stock.Request{Product: sp, Mode: stock.Lua,
		Ticket: stock.Ticket{User: 2, Order: 123456789, Key: "died"}}); err != nil {
		t.Fatal(err)
	}
	if a := f.audit(1); a.Unsettled != 1 || a.Verdict != api.VerdictLost {
		t.Fatalf("audit with a stranded take %+v: want 1 unsettled, LOST", a)
	}
	r, err := f.svc.Reconciler().Reconcile(t.Context(), 1)
	if err != nil || r.Returned != 0 || r.Pending != 1 {
		t.Fatalf("a pass within the grace period: %+v, %v; want the take left pending", r, err)
	}

	f = &fixture{t: t, svc: nil, rdb: f.rdb, db: f.db, mr: f.mr}
	locks, _ := lock.OpenPool(t.Context(), lock.PoolConfig{Redis: f.rdb})
	t.Cleanup(func() { locks.Close() })
	svc, err := order.NewService(f.db, f.rdb, locks, order.Options{ReconcileGrace: time.Nanosecond, ReconcileEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	f.svc = svc
	if r, err = svc.Reconciler().Reconcile(t.Context(), 1); err != nil || r.Returned != 1 || r.Takes != 2 || r.Orphans != 0 {
		t.Fatalf("a pass after the grace period: %+v, %v; want the stranded unit returned", r, err)
	}
	a := f.audit(1)
	if a.Orders != 1 || a.Remaining != 4 || a.Unsettled != 0 || a.Verdict != api.VerdictOK || a.Reconciled == nil || a.Reconciled.Returned != 1 {
		t.Errorf("audit after the pass %+v: want exact, with the pass", a)
	}
	// The void row holds the stranded order's id: that order can never be
	// written late, and it is not an order.
	if _, err := svc.Order(t.Context(), 123456789); !errors.Is(err, order.ErrNotFound) {
		t.Errorf("the voided order: %v, want not found", err)
	}
	if _, _, err := svc.Buy(t.Context(), order.Purchase{UserID: 2, ProductID: 1}); err != nil {
		t.Errorf("the stranded buyer buying again: %v", err)
	}
}

// A process started on a fresh database beside a Redis that holds the
// product's layout does not lay its stock out again.
func TestCreateIfAbsentLeavesAForeignLayout(t *testing.T) {
	f := newFixture(t, order.Options{})
	f.reset(catalogue.ProductSpec{ID: 1, Stock: 10, Shards: 2})
	if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: 1}); err != nil {
		t.Fatal(err)
	}
	before := f.mr.Keys()
	// Another database, the same Redis.
	_, db2, _ := testenv.Local(t)
	locks, _ := lock.OpenPool(t.Context(), lock.PoolConfig{Redis: f.rdb})
	t.Cleanup(func() { locks.Close() })
	svc2, err := order.NewService(db2, f.rdb, locks, order.Options{ReconcileEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc2.Close() })
	if _, err := svc2.Catalogue().CreateIfAbsent(t.Context(), catalogue.ProductSpec{ID: 1, Stock: 100}); !errors.Is(err, catalogue.ErrExists) {
		t.Fatalf("CreateIfAbsent beside a live layout: %v, want catalogue.ErrExists", err)
	}
	if a := f.audit(1); a.Remaining != 9 || a.Orders != 1 {
		t.Errorf("the sale after the second process started: %+v", a)
	}
	if after := f.mr.Keys(); len(after) != len(before) {
		t.Errorf("keys %v became %v", before, after)
	}
}

// The scheduled pass starts from the takes its last pass found settled and
// reads only the orders of the others and the rows that are not live: it
// still returns a take stranded after a pass that found nothing to do, and
// a settled take whose order was cancelled without its unit going back;
// async takes still queued stay pending; its orphan count is the complete
// pass's.
func TestScheduledPassMissesNoStrandedTake(t *testing.T) {
	t.Run("lua", func(t *testing.T) {
		f := newFixture(t, order.Options{ReconcileGrace: time.Nanosecond})
		p := f.reset(catalogue.ProductSpec{ID: 1, Stock: 10, Shards: 2, Mode: "lua"})
		var orders []order.Order
		for u := int64(1); u <= 3; u++ {
			o, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: u, ProductID: 1})
			if err != nil {
				t.Fatal(err)
			}
			orders = append(orders, o)
		}
		pass := func(what string, want order.Reconciliation, remembered int) {
			t.Helper()
			r, err := f.svc.Reconciler().ReconcileScheduled(t.Context(), 1)
			if err != nil || r.Returned != want.Returned || r.Takes != want.Takes || r.Pending != want.Pending || r.Orphans != want.Orphans {
				t.Fatalf("%s: %+v, %v; want %+v", what, r, err, want)
			}
			if got := f.svc.Reconciler().Remembered(1); got != remembered {
				t.Fatalf("%s: %d takes left settled for the next pass, want %d", what, got, remembered)
			}
		}
		pass("the first pass (every order)", order.Reconciliation{Takes: 3}, 3)
		pass("a pass with nothing new", order.Reconciliation{Takes: 3}, 3)

		// A process took a unit for buyer 4 and died before its INSERT.
		store := stock.NewStore(f.rdb, f.db)
		sp := stock.Product{Layout: stock.Layout{ID: 1, Shards: p.Shards, Epoch: p.Epoch}, Where: stock.InRedis, Fallback: true}
		if _, err := store.Take(t.Context(), stock.Request{Product: sp, Mode: stock.Lua,
			Ticket: stock.Ticket{User: 4, Order: 123456789, Key: "died"}}); err != nil {
			t.Fatal(err)
		}
		pass("a pass after a take was stranded", order.Reconciliation{Takes: 4, Returned: 1}, 3)
		if a := f.audit(1); a.Orders != 3 || a.Remaining != 7 || a.Unsettled != 0 || a.Verdict != api.VerdictOK {
			t.Fatalf("audit after the stranded take's return %+v: want 3 orders, 7 left, OK", a)
		}

		// Buyer 1's order was settled; it is cancelled and Redis fails
		// before the give-back: the take stays in the ledger.
		err := f.db.Model(&order.Order{}).Where("id = ?", int64(orders[0].ID)).
			Updates(map[string]any{"status": order.Cancelled, "buyer": nil, "cancelled_by": order.ByBuyer}).Error
		if err != nil {
			t.Fatal(err)
		}
		pass("a pass after a settled order was cancelled", order.Reconciliation{Takes: 3, Returned: 1}, 2)
		if a := f.audit(1); a.Orders != 2 || a.Remaining != 8 || a.Unsettled != 0 || a.Verdict != api.VerdictOK {
			t.Fatalf("audit after the cancelled order's return %+v: want 2 orders, 8 left, OK", a)
		}

		// An order that no take names is a take the store forgot: the
		// scheduled pass records it again and takes its unit back, once.
		buyer := int64(9)
		now := time.Now()
		orphan := order.Order{ID: 987654321, ProductID: 1, Sale: p.Sale, Buyer: &buyer, UserID: buyer, Lock: p.Lock,
			Mode: p.Mode, Status: order.Unpaid, CreatedAt: now, AcceptedAt: &now}
		if err := f.db.Create(&orphan).Error; err != nil {
			t.Fatal(err)
		}
		if r, err := f.svc.Reconciler().ReconcileScheduled(t.Context(), 1); err != nil || r.Restored != 1 || r.Orphans != 0 || r.Takes != 2 {
			t.Fatalf("a pass with an order whose take was forgotten: %+v, %v; want it restored", r, err)
		}
		if r, err := f.svc.Reconciler().Reconcile(t.Context(), 1); err != nil || r.Orphans != 0 || r.Restored != 0 || r.Takes != 3 || r.Returned != 0 {
			t.Fatalf("the complete pass after the restore: %+v, %v; want 3 takes, nothing to do", r, err)
		}
		if a := f.audit(1); a.Orders != 3 || a.Remaining != 7 || a.Verdict != api.VerdictOK || a.Repaired == nil || a.Repaired.Units != 1 {
			t.Fatalf("audit after the restore %+v: want 3 orders, 7 left, OK, one unit taken back", a)
		}
	})

	t.Run("async", func(t *testing.T) {
		f := newFixture(t, order.Options{ReconcileGrace: time.Nanosecond})
		f.reset(catalogue.ProductSpec{ID: 1, Stock: 10, Shards: 2, Mode: "async", Lab: true})
		for u := int64(1); u <= 3; u++ {
			if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: u, ProductID: 1}); err != nil {
				t.Fatal(err)
			}
		}
		for _, what := range []string{"the first pass", "the next"} {
			if r, err := f.svc.Reconciler().ReconcileScheduled(t.Context(), 1); err != nil || r.Returned != 0 || r.Pending != 3 {
				t.Fatalf("%s with 3 queued orders older than the grace: %+v, %v; want them pending", what, r, err)
			}
		}
		f.consumer(outbox.Options{})
		f.waitAudit(1, "the queue drained", func(a order.Audit) bool { return a.Queued == 0 && a.Orders == 3 })
		if r, err := f.svc.Reconciler().ReconcileScheduled(t.Context(), 1); err != nil || r.Returned != 0 || r.Pending != 0 || f.svc.Reconciler().Remembered(1) != 3 {
			t.Fatalf("the pass after the drain: %+v, %v, %d settled; want 3 settled", r, err, f.svc.Reconciler().Remembered(1))
		}
		if a := f.audit(1); a.Orders != 3 || a.Remaining != 7 || a.Verdict != api.VerdictOK {
			t.Fatalf("audit %+v: want 3 orders, 7 left, OK", a)
		}
	})
}
