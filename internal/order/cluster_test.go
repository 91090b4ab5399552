package order_test

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"seckill/internal/api"
	"seckill/internal/catalogue"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/outbox"
	"seckill/internal/reconcile"
	"seckill/internal/stock"
	"seckill/internal/testkit"
	"seckill/internal/testkit/testenv"
)

// The service on a Redis Cluster (testkit.NewRedisCluster): for each mode that
// keeps its stock in Redis, one buyer sends 50 purchases at once, each with
// a key of its own: one order, 49 told already_bought; then 40 buyers for
// the 29 units left: every unit sold once, and the audit exact.
func TestServiceOnCluster(t *testing.T) {
	c := testkit.NewRedisCluster(t)
	t.Logf("cluster: %s", c.Kind())
	for _, mode := range []string{api.ModeLua, api.ModeRMW, api.ModeAsync} {
		t.Run(mode, func(t *testing.T) {
			_, db, _ := testenv.Local(t)
			locks, err := lock.OpenPool(t.Context(), lock.PoolConfig{Redis: c.Client})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { locks.Close() })
			svc, rec := testenv.Orders(t, db, c.Client, locks, order.Options{LockWait: 10 * time.Second}, reconcile.Options{})
			consumer := order.NewConsumer(db, svc, outbox.Options{})
			consumer.Start()
			t.Cleanup(func() { consumer.Close() })
			id := testenv.ProductID(t)
			// The test cluster keeps nothing: only a lab product may be async on it.
			spec := catalogue.ProductSpec{ID: id, Stock: 30, Shards: 3, Lock: "token", Mode: mode, Lab: mode == api.ModeAsync}
			if _, err := svc.Catalogue().Reset(t.Context(), spec); err != nil {
				t.Fatal(err)
			}
			buy := func(n int, user func(i int) int64) (ok int, errs map[string]int) {
				var mu sync.Mutex
				var wg sync.WaitGroup
				errs = map[string]int{}
				gate := make(chan struct{})
				for i := range n {
					wg.Go(func() {
						<-gate
						_, _, err := svc.Buy(t.Context(), order.Purchase{UserID: user(i), ProductID: id, Key: "k" + strconv.Itoa(i)})
						mu.Lock()
						defer mu.Unlock()
						switch {
						case err == nil:
							ok++
						case errors.Is(err, stock.ErrAlreadyBought):
							errs["already bought"]++
						case errors.Is(err, stock.ErrSoldOut):
							errs["sold out"]++
						default:
							errs[err.Error()]++
						}
					})
				}
				close(gate)
				wg.Wait()
				return ok, errs
			}
			if ok, errs := buy(50, func(int) int64 { return 7 }); ok != 1 || errs["already bought"] != 49 {
				t.Errorf("one buyer, 50 purchases at once: %d succeeded, %v; want 1 and 49 already bought", ok, errs)
			}
			if ok, errs := buy(40, func(i int) int64 { return 100 + int64(i) }); ok != 29 || errs["sold out"] != 11 {
				t.Errorf("40 buyers for 29 units: %d succeeded, %v; want 29 and 11 sold out", ok, errs)
			}
			var a reconcile.Audit
			deadline := time.Now().Add(30 * time.Second)
			for {
				_, a, err = rec.Audit(t.Context(), id)
				if err != nil {
					t.Fatal(err)
				}
				if a.Queued == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond) // the poll interval, while the consumer writes
			}
			if a.Verdict != api.VerdictOK || a.Orders != 30 || a.Taken != 30 || a.Unsettled != 0 || a.Remaining != 0 {
				t.Errorf("audit %+v: want OK, 30 orders and takes, none unsettled, none left", a)
			}
		})
	}
}

// The order lifecycle on a Redis Cluster: a cancel returns the unit and
// forgets the buyer (whose key is on another node than the shard), who may
// buy again; an unpaid order is cancelled at its window's end.
func TestLifecycleOnCluster(t *testing.T) {
	c := testkit.NewRedisCluster(t)
	_, db, _ := testenv.Local(t)
	locks, err := lock.OpenPool(t.Context(), lock.PoolConfig{Redis: c.Client})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locks.Close() })
	svc, rec := testenv.Orders(t, db, c.Client, locks, order.Options{DueEvery: -1}, reconcile.Options{})
	ctx := t.Context()
	id := testenv.ProductID(t)
	if _, err := svc.Catalogue().Reset(ctx, catalogue.ProductSpec{ID: id, Stock: 2, Shards: 2, Mode: api.ModeLua, PayTimeout: catalogue.MinPayTimeout}); err != nil {
		t.Fatal(err)
	}
	o, _, err := svc.Buy(ctx, order.Purchase{UserID: 1, ProductID: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Lifecycle().Cancel(ctx, o.ID, order.Buyer{ID: 1, Signed: true}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	again, _, err := svc.Buy(ctx, order.Purchase{UserID: 1, ProductID: id})
	if err != nil || again.ID == o.ID {
		t.Fatalf("buying again after the cancel: %+v %v, want a new order", again, err)
	}
	time.Sleep(time.Until(*again.DueAt) + 5*time.Millisecond) // the window ends: not a condition polled for
	if err := svc.Lifecycle().ExpireDue(ctx); err != nil {
		t.Fatal(err)
	}
	_, a, err := rec.Audit(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if a.Verdict != api.VerdictOK || a.Cancelled != 2 || a.Remaining != 2 || a.Orders != 0 {
		t.Errorf("audit %+v: want both orders cancelled, both units back, OK", a)
	}
}
