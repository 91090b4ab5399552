package reconcile_test

import (
	"errors"
	"testing"
	"time"

	"seckill/internal/api"
	"seckill/internal/catalogue"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/outbox"
	"seckill/internal/reconcile"
	"seckill/internal/stock"
	"seckill/internal/testkit/testenv"
)

// A take whose purchase died before its order was written is stranded: the
// reconciler returns its unit after the grace period, and its buyer may buy
// again; a take younger than the grace period is left alone.
// TestReconcilerSeesABuyersSecondTake: on a Redis Cluster a buyer whose
// key's node failed mid-take may hold a take in each of two shards (the
// double window). The one without an order must be returned: read by buyer,
// the ledgers showed one take per buyer, the later shard's, and a CI run
// lost the unit of the other for good (TestRedisCluster, a master killed
// mid-burst: LOST 1). The second take may carry the order's own id: the
// purchase's first take landed on a master that died before answering,
// and its retry with the same key took again on another shard. Matched by
// id alone, both takes were the order's, and a later CI run lost that unit
// too (213 takes, 212 orders, the pass returning nothing): only the take on
// the order's shard is the order's. Both by a complete pass and by a
// scheduled one, which starts from the last pass's settled takes.
func TestReconcilerSeesABuyersSecondTake(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sameOrder bool
		scheduled bool
	}{
		{"another order id", false, false},
		{"the order's own id", true, false},
		{"the order's own id, scheduled pass", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := testenv.NewSale(t, order.Options{}, reconcile.Options{Grace: time.Nanosecond})
			p := f.Reset(catalogue.ProductSpec{ID: 1, Stock: 6, Shards: 2, Mode: "lua"})
			// Two buyers: the round robin puts one of them on shard 1.
			var real order.Order
			for user := int64(1); user <= 2; user++ {
				o, _, err := f.Svc.Buy(t.Context(), order.Purchase{UserID: user, ProductID: 1})
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
			pass := f.Rec.Reconcile
			if tc.scheduled {
				pass = f.Rec.ReconcileScheduled
				if r, err := pass(t.Context(), 1); err != nil || r.Takes != 2 || f.Rec.Remembered(1) != 2 {
					t.Fatalf("the first scheduled pass: %+v, %v", r, err)
				}
			}
			// Its second take, on shard 0 (read before shard 1), with no
			// order of its own: a unit out of the stock and a record in the
			// ledger, in one step as a take does.
			l := stock.Layout{ID: 1, Shards: p.Shards, Epoch: p.Epoch}
			extra := stock.Entry{User: real.UserID, Order: 987654321, Key: "second", Shard: 0, At: time.Now().Add(-time.Minute)}
			if tc.sameOrder {
				extra.Order, extra.Key = real.ID, real.Key
			}
			if err := f.RDB.Decr(t.Context(), l.StockKey(0)).Err(); err != nil {
				t.Fatal(err)
			}
			if err := stock.NewStore(f.RDB, f.DB).Ledgers().Record(t.Context(), l, []stock.Entry{extra}); err != nil {
				t.Fatal(err)
			}
			if a := f.Audit(1); a.Remaining != 3 || a.Orders != 2 || a.Verdict != api.VerdictLost {
				t.Fatalf("audit with the second take %+v: want 3 remaining, 2 orders, LOST", a)
			}
			r, err := pass(t.Context(), 1)
			if err != nil || r.Takes != 3 || r.Returned != 1 || r.Orphans != 0 {
				t.Fatalf("pass: %+v, %v; want 3 takes seen and the second take's unit returned", r, err)
			}
			if a := f.Audit(1); a.Remaining != 4 || a.Orders != 2 || a.Verdict != api.VerdictOK {
				t.Errorf("audit after the pass %+v: want 4 remaining, 2 orders, OK", a)
			}
			if _, err := f.Svc.Reads().Order(t.Context(), real.ID); err != nil {
				t.Errorf("the buyer's order after the pass: %v, want it kept", err)
			}
		})
	}
}

func TestReconcilerReturnsStrandedUnits(t *testing.T) {
	f := testenv.NewSale(t, order.Options{}, reconcile.Options{Grace: time.Hour})
	p := f.Reset(catalogue.ProductSpec{ID: 1, Stock: 5, Shards: 2, Mode: "lua"})
	if _, _, err := f.Svc.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: 1}); err != nil {
		t.Fatal(err)
	}
	// A process took a unit for buyer 2 and died before its INSERT.
	store := stock.NewStore(f.RDB, f.DB)
	sp := stock.Product{Layout: stock.Layout{ID: 1, Shards: p.Shards, Epoch: p.Epoch}, Where: stock.InRedis, Fallback: true}
	if _, err := store.Take(t.Context(), stock.Request{Product: sp, Taker: stock.Lua{},
		Ticket: stock.Ticket{User: 2, Order: 123456789, Key: "died"}}); err != nil {
		t.Fatal(err)
	}
	if a := f.Audit(1); a.Unsettled != 1 || a.Verdict != api.VerdictLost {
		t.Fatalf("audit with a stranded take %+v: want 1 unsettled, LOST", a)
	}
	r, err := f.Rec.Reconcile(t.Context(), 1)
	if err != nil || r.Returned != 0 || r.Pending != 1 {
		t.Fatalf("a pass within the grace period: %+v, %v; want the take left pending", r, err)
	}

	// Another process, whose grace is over.
	locks, _ := lock.OpenPool(t.Context(), lock.PoolConfig{Redis: f.RDB})
	t.Cleanup(func() { locks.Close() })
	svc, rec := testenv.Orders(t, f.DB, f.RDB, locks, order.Options{}, reconcile.Options{Grace: time.Nanosecond})
	f.Svc, f.Rec = svc, rec
	if r, err = rec.Reconcile(t.Context(), 1); err != nil || r.Returned != 1 || r.Takes != 2 || r.Orphans != 0 {
		t.Fatalf("a pass after the grace period: %+v, %v; want the stranded unit returned", r, err)
	}
	if n := rec.Returned(); n != 1 { // seckill_reconciler_returned_total
		t.Errorf("the reconciler counts %d units returned, want 1", n)
	}
	a := f.Audit(1)
	if a.Orders != 1 || a.Remaining != 4 || a.Unsettled != 0 || a.Verdict != api.VerdictOK || a.Reconciled == nil || a.Reconciled.Returned != 1 {
		t.Errorf("audit after the pass %+v: want exact, with the pass", a)
	}
	// The void row holds the stranded order's id: that order can never be
	// written late, and it is not an order.
	if _, err := svc.Reads().Order(t.Context(), 123456789); !errors.Is(err, order.ErrNotFound) {
		t.Errorf("the voided order: %v, want not found", err)
	}
	if _, _, err := svc.Buy(t.Context(), order.Purchase{UserID: 2, ProductID: 1}); err != nil {
		t.Errorf("the stranded buyer buying again: %v", err)
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
		f := testenv.NewSale(t, order.Options{}, reconcile.Options{Grace: time.Nanosecond})
		p := f.Reset(catalogue.ProductSpec{ID: 1, Stock: 10, Shards: 2, Mode: "lua"})
		var orders []order.Order
		for u := int64(1); u <= 3; u++ {
			o, _, err := f.Svc.Buy(t.Context(), order.Purchase{UserID: u, ProductID: 1})
			if err != nil {
				t.Fatal(err)
			}
			orders = append(orders, o)
		}
		pass := func(what string, want reconcile.Reconciliation, remembered int) {
			t.Helper()
			r, err := f.Rec.ReconcileScheduled(t.Context(), 1)
			if err != nil || r.Returned != want.Returned || r.Takes != want.Takes || r.Pending != want.Pending || r.Orphans != want.Orphans {
				t.Fatalf("%s: %+v, %v; want %+v", what, r, err, want)
			}
			if got := f.Rec.Remembered(1); got != remembered {
				t.Fatalf("%s: %d takes left settled for the next pass, want %d", what, got, remembered)
			}
		}
		pass("the first pass (every order)", reconcile.Reconciliation{Takes: 3}, 3)
		pass("a pass with nothing new", reconcile.Reconciliation{Takes: 3}, 3)

		// A process took a unit for buyer 4 and died before its INSERT.
		store := stock.NewStore(f.RDB, f.DB)
		sp := stock.Product{Layout: stock.Layout{ID: 1, Shards: p.Shards, Epoch: p.Epoch}, Where: stock.InRedis, Fallback: true}
		if _, err := store.Take(t.Context(), stock.Request{Product: sp, Taker: stock.Lua{},
			Ticket: stock.Ticket{User: 4, Order: 123456789, Key: "died"}}); err != nil {
			t.Fatal(err)
		}
		pass("a pass after a take was stranded", reconcile.Reconciliation{Takes: 4, Returned: 1}, 3)
		if a := f.Audit(1); a.Orders != 3 || a.Remaining != 7 || a.Unsettled != 0 || a.Verdict != api.VerdictOK {
			t.Fatalf("audit after the stranded take's return %+v: want 3 orders, 7 left, OK", a)
		}

		// Buyer 1's order was settled; it is cancelled and Redis fails
		// before the give-back: the take stays in the ledger.
		err := f.DB.Model(&order.Order{}).Where("id = ?", int64(orders[0].ID)).
			Updates(map[string]any{"status": order.Cancelled, "buyer": nil, "cancelled_by": order.ByBuyer}).Error
		if err != nil {
			t.Fatal(err)
		}
		pass("a pass after a settled order was cancelled", reconcile.Reconciliation{Takes: 3, Returned: 1}, 2)
		if a := f.Audit(1); a.Orders != 2 || a.Remaining != 8 || a.Unsettled != 0 || a.Verdict != api.VerdictOK {
			t.Fatalf("audit after the cancelled order's return %+v: want 2 orders, 8 left, OK", a)
		}

		// An order that no take names is a take the store forgot: the
		// scheduled pass records it again and takes its unit back, once.
		buyer := int64(9)
		now := time.Now()
		orphan := order.Order{ID: 987654321, ProductID: 1, Sale: p.Sale, Buyer: &buyer, UserID: buyer, Lock: p.Lock,
			Mode: p.Mode, Status: order.Unpaid, CreatedAt: now, AcceptedAt: &now}
		if err := f.DB.Create(&orphan).Error; err != nil {
			t.Fatal(err)
		}
		if r, err := f.Rec.ReconcileScheduled(t.Context(), 1); err != nil || r.Restored != 1 || r.Orphans != 0 || r.Takes != 2 {
			t.Fatalf("a pass with an order whose take was forgotten: %+v, %v; want it restored", r, err)
		}
		if r, err := f.Rec.Reconcile(t.Context(), 1); err != nil || r.Orphans != 0 || r.Restored != 0 || r.Takes != 3 || r.Returned != 0 {
			t.Fatalf("the complete pass after the restore: %+v, %v; want 3 takes, nothing to do", r, err)
		}
		if a := f.Audit(1); a.Orders != 3 || a.Remaining != 7 || a.Verdict != api.VerdictOK || a.Repaired == nil || a.Repaired.Units != 1 {
			t.Fatalf("audit after the restore %+v: want 3 orders, 7 left, OK, one unit taken back", a)
		}
	})

	t.Run("async", func(t *testing.T) {
		f := testenv.NewSale(t, order.Options{}, reconcile.Options{Grace: time.Nanosecond})
		f.Reset(catalogue.ProductSpec{ID: 1, Stock: 10, Shards: 2, Mode: "async", Lab: true})
		for u := int64(1); u <= 3; u++ {
			if _, _, err := f.Svc.Buy(t.Context(), order.Purchase{UserID: u, ProductID: 1}); err != nil {
				t.Fatal(err)
			}
		}
		for _, what := range []string{"the first pass", "the next"} {
			if r, err := f.Rec.ReconcileScheduled(t.Context(), 1); err != nil || r.Returned != 0 || r.Pending != 3 {
				t.Fatalf("%s with 3 queued orders older than the grace: %+v, %v; want them pending", what, r, err)
			}
		}
		f.Consumer(outbox.Options{})
		f.WaitAudit(1, "the queue drained", func(a reconcile.Audit) bool { return a.Queued == 0 && a.Orders == 3 })
		if r, err := f.Rec.ReconcileScheduled(t.Context(), 1); err != nil || r.Returned != 0 || r.Pending != 0 || f.Rec.Remembered(1) != 3 {
			t.Fatalf("the pass after the drain: %+v, %v, %d settled; want 3 settled", r, err, f.Rec.Remembered(1))
		}
		if a := f.Audit(1); a.Orders != 3 || a.Remaining != 7 || a.Verdict != api.VerdictOK {
			t.Fatalf("audit %+v: want 3 orders, 7 left, OK", a)
		}
	})
}
