package order_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"seckill/internal/api"
	"seckill/internal/catalogue"
	"seckill/internal/idgen"
	"seckill/internal/order"
	"seckill/internal/reconcile"
	"seckill/internal/stock"
	"seckill/internal/testkit/testenv"
)

func (f *fixture) buy(product, user int64) order.Order {
	f.t.Helper()
	o, _, err := f.svc.Buy(f.t.Context(), order.Purchase{UserID: user, ProductID: product})
	if err != nil {
		f.t.Fatalf("user %d buys product %d: %v", user, product, err)
	}
	return o
}

// Pay, cancel, and the states they lose to: a paid order cannot be paid or
// cancelled again; a cancelled one gives its unit back once and frees its
// buyer; another buyer's order is not found.
func TestPayAndCancel(t *testing.T) {
	for _, mode := range []string{"lua", "db", "rmw"} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t, order.Options{})
			f.Reset(catalogue.ProductSpec{ID: 1, Stock: 5, Shards: 2, Mode: mode, PayTimeout: time.Minute})
			a, b := f.buy(1, 1), f.buy(1, 2)
			if a.DueAt == nil || a.DueAt.Sub(a.CreatedAt) != time.Minute {
				t.Errorf("due %v for an order made at %v: want a minute later", a.DueAt, a.CreatedAt)
			}
			ctx := t.Context()
			if _, err := f.svc.Lifecycle().Pay(ctx, a.ID, order.Buyer{ID: 2, Signed: true}); !errors.Is(err, order.ErrNotFound) {
				t.Errorf("paying another buyer's order: %v, want not found", err)
			}
			if o, err := f.svc.Lifecycle().Pay(ctx, a.ID, order.Buyer{ID: 1, Signed: true}); err != nil || o.Status != order.Paid || o.PaidAt == nil {
				t.Fatalf("pay: %+v, %v", o, err)
			}
			if _, err := f.svc.Lifecycle().Pay(ctx, a.ID, order.Buyer{ID: 1, Signed: true}); !errors.Is(err, order.ErrAlreadyPaid) {
				t.Errorf("paying twice: %v, want ErrAlreadyPaid", err)
			}
			if _, err := f.svc.Lifecycle().Cancel(ctx, a.ID, order.Buyer{ID: 1, Signed: true}); !errors.Is(err, order.ErrAlreadyPaid) {
				t.Errorf("cancelling a paid order: %v, want ErrAlreadyPaid", err)
			}
			if o, err := f.svc.Lifecycle().Cancel(ctx, b.ID, order.Buyer{ID: 2, Signed: true}); err != nil || o.Status != order.Cancelled || o.CancelledBy != order.ByBuyer {
				t.Fatalf("cancel: %+v, %v", o, err)
			}
			for _, try := range []func(context.Context, idgen.ID, order.Buyer) (order.Order, error){f.svc.Lifecycle().Cancel, f.svc.Lifecycle().Pay} {
				if _, err := try(ctx, b.ID, order.Buyer{ID: 2, Signed: true}); !errors.Is(err, order.ErrCancelled) {
					t.Errorf("after the cancel: %v, want ErrCancelled", err)
				}
			}
			a2 := f.Audit(1)
			if a2.Paid != 1 || a2.Unpaid != 0 || a2.Cancelled != 1 || a2.Orders != 1 || a2.Remaining != 4 || a2.Verdict != api.VerdictOK {
				t.Errorf("audit %+v: want 1 paid, 1 cancelled with its unit back (4 left), OK", a2)
			}
			if o := f.buy(1, 2); o.ID == b.ID {
				t.Error("the buyer of the cancelled order bought again and got the same order")
			}
		})
	}
}

// The payment window's end cancels the unpaid orders and returns their
// units; a paid one stays. The deadline sets, emptied, leave the registry
// the passes read.
func TestTimeoutCancelsUnpaidOrders(t *testing.T) {
	f := newFixture(t, order.Options{DueEvery: 20 * time.Millisecond})
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: 5, Shards: 2, Mode: "lua", PayTimeout: catalogue.MinPayTimeout})
	paid := f.buy(1, 1)
	f.buy(1, 2)
	f.buy(1, 3)
	if _, err := f.svc.Lifecycle().Pay(t.Context(), paid.ID, order.Buyer{ID: 1, Signed: true}); err != nil {
		t.Fatal(err)
	}
	// Cancelled in SQL first, then the unit goes back: wait for both.
	a := f.WaitAudit(1, "the window's end", func(a reconcile.Audit) bool { return a.Cancelled == 2 && a.Unsettled == 0 })
	if a.Paid != 1 || a.Unpaid != 0 || a.Remaining != 4 || a.Verdict != api.VerdictOK {
		t.Errorf("audit %+v: want 1 paid, 2 cancelled with their units back", a)
	}
	if _, err := f.svc.Lifecycle().Pay(t.Context(), paid.ID+0, order.Buyer{ID: 1, Signed: true}); !errors.Is(err, order.ErrAlreadyPaid) {
		t.Errorf("%v", err)
	}
	deadlines := stock.NewStore(f.rdb, f.db).Deadlines()
	testenv.WaitFor(t, "the emptied deadline sets leaving the registry", func() bool {
		sets, err := deadlines.DueSets(t.Context())
		return err == nil && len(sets) == 0
	})
}

// A payment that comes once the window has ended, before the expirer has
// run (it is off here), is refused as the expirer's cancel would have been:
// the window's end is the order's due_at, not the moment the expirer passes.
// The order is then cancelled and its unit back.
func TestPayAfterTheWindowBeforeTheExpirer(t *testing.T) {
	f := newFixture(t, order.Options{DueEvery: -1})
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: 2, Shards: 1, Mode: "lua", PayTimeout: time.Minute})
	o := f.buy(1, 1)
	// The window ended a moment ago: as if the minute had passed.
	past := time.Now().Add(-time.Millisecond)
	if err := f.db.Model(&order.Order{}).Where("id = ?", int64(o.ID)).Update("due_at", past).Error; err != nil {
		t.Fatal(err)
	}
	if paid, err := f.svc.Lifecycle().Pay(t.Context(), o.ID, order.Buyer{ID: 1, Signed: true}); !errors.Is(err, order.ErrCancelled) {
		t.Fatalf("paying after the window's end: %+v, %v; want ErrCancelled", paid, err)
	}
	a := f.WaitAudit(1, "the late order cancelled and its unit back", func(a reconcile.Audit) bool { return a.Cancelled == 1 && a.Unsettled == 0 })
	if a.Paid != 0 || a.Remaining != 2 || a.Verdict != api.VerdictOK {
		t.Errorf("audit %+v: want nothing paid, the unit back (2 left), OK", a)
	}
}

// Pay, cancel and the timeout at once, on many orders released together:
// each order ends paid or cancelled, never both; only the cancels return
// units, once each; the audit is exact.
func TestExactlyOneOfPayCancelTimeoutWins(t *testing.T) {
	f := newFixture(t, order.Options{DueEvery: 5 * time.Millisecond})
	const n = 40
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: n, Shards: 4, Mode: "lua", PayTimeout: catalogue.MinPayTimeout})
	orders := make([]order.Order, n)
	for i := range orders {
		orders[i] = f.buy(1, int64(i+1))
	}
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i, o := range orders {
		user := int64(i + 1)
		wg.Go(func() {
			<-gate
			time.Sleep(time.Until(*o.DueAt) - 5*time.Millisecond) // a little before the end
			f.svc.Lifecycle().Pay(context.Background(), o.ID, order.Buyer{ID: user, Signed: true})
		})
		wg.Go(func() {
			<-gate
			time.Sleep(time.Until(*o.DueAt) - 5*time.Millisecond)
			f.svc.Lifecycle().Cancel(context.Background(), o.ID, order.Buyer{ID: user, Signed: true})
		})
	}
	close(gate)
	wg.Wait()
	a := f.WaitAudit(1, "every order settled", func(a reconcile.Audit) bool { return a.Unpaid == 0 && a.Unsettled == 0 })
	if a.Paid+a.Cancelled != n || a.Remaining != a.Cancelled || a.Verdict != api.VerdictOK {
		t.Errorf("audit %+v: want every order paid or cancelled, one unit back per cancel, OK", a)
	}
	t.Logf("%d paid, %d cancelled", a.Paid, a.Cancelled)
}

// The naive lifecycle reads the status, then writes: a payment and a
// cancellation that both read "unpaid" both win, and a unit is both paid
// for and back on sale. (The harness's pay-vs-timeout scenario races the
// payment with the timeout; the check-then-act is the same.)
func TestNaiveLifecycleLosesTheRace(t *testing.T) {
	f := newFixture(t, order.Options{DueEvery: -1})
	const n = 20
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: n, Shards: 2, Mode: "lua", PayTimeout: time.Minute, Lab: true, Lifecycle: catalogue.Naive})
	orders := make([]order.Order, n)
	for i := range orders {
		orders[i] = f.buy(1, int64(i+1))
	}
	gate := make(chan struct{})
	var (
		wg     sync.WaitGroup
		paidOK atomic.Int64
	)
	for i, o := range orders {
		user := int64(i + 1)
		wg.Go(func() {
			<-gate
			if _, err := f.svc.Lifecycle().Pay(context.Background(), o.ID, order.Buyer{ID: user, Signed: true}); err == nil {
				paidOK.Add(1)
			}
		})
		wg.Go(func() {
			<-gate
			f.svc.Lifecycle().Cancel(context.Background(), o.ID, order.Buyer{ID: user, Signed: true})
		})
	}
	close(gate)
	wg.Wait()
	// A unit paid for and returned: a paid row whose unit went back (lost
	// updates), or a payment told it succeeded whose order ended cancelled.
	a := f.Audit(1)
	if both := max(0, a.LostUpdates) + max(0, int(paidOK.Load())-a.Paid); both == 0 {
		t.Errorf("audit %+v, %d payments told they succeeded: want units both paid for and returned", a, paidOK.Load())
	}
	t.Logf("audit %+v, %d payments told they succeeded", a, paidOK.Load())
	// A product that is not a lab product cannot choose it.
	if _, err := f.svc.Catalogue().Reset(t.Context(), catalogue.ProductSpec{ID: 2, Stock: 1, Lifecycle: catalogue.Naive}); !errors.Is(err, order.ErrInvalid) {
		t.Errorf("a naive lifecycle on a product that is not a lab product: %v, want ErrInvalid", err)
	}
}

// A process that claims deadlines and dies loses nothing: they come due
// again when the claim's lease ends, and another process cancels them.
func TestClaimedDeadlinesOfADeadProcessComeDueAgain(t *testing.T) {
	f := newFixture(t, order.Options{DueEvery: -1})
	p := f.Reset(catalogue.ProductSpec{ID: 1, Stock: 2, Shards: 1, Mode: "lua", PayTimeout: catalogue.MinPayTimeout})
	o := f.buy(1, 1)
	time.Sleep(time.Until(*o.DueAt) + 2*time.Millisecond) // the window has ended
	store := stock.NewStore(f.rdb, f.db)
	key := stock.Layout{ID: p.ID}.DueKey(o.Shard)
	ids, err := store.Deadlines().ClaimDue(t.Context(), key, time.Now(), 200*time.Millisecond, 10) // and dies
	if err != nil || len(ids) != 1 || ids[0] != o.ID {
		t.Fatalf("the dead process's claim: %v, %v", ids, err)
	}
	if err := f.svc.Lifecycle().ExpireDue(t.Context()); err != nil {
		t.Fatal(err)
	}
	if a := f.Audit(1); a.Cancelled != 0 {
		t.Fatalf("cancelled while another held the claim: %+v", a)
	}
	time.Sleep(250 * time.Millisecond)
	if err := f.svc.Lifecycle().ExpireDue(t.Context()); err != nil {
		t.Fatal(err)
	}
	if a := f.Audit(1); a.Cancelled != 1 || a.Remaining != 2 {
		t.Errorf("after the lease: %+v, want the order cancelled and its unit back", a)
	}
}
