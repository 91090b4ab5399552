package order_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"seckill/internal/order"
	"seckill/internal/stock"
	"seckill/internal/testenv"
)

// newService returns a service on miniredis and an in-memory SQLite: what is
// tested here is the service's own bookkeeping.
func newService(t *testing.T) (*order.Service, *miniredis.Miniredis) {
	t.Helper()
	rdb, db, mr := testenv.Local(t)
	svc, err := order.NewService(db, rdb, order.Options{LockWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return svc, mr
}

// TestCloseWaitsForPurchasesInFlight: a purchase that has taken its unit
// must end, in an order or back in the store, before the backends close.
func TestCloseWaitsForPurchasesInFlight(t *testing.T) {
	svc, mr := newService(t)
	ctx := t.Context()
	if _, err := svc.Reset(ctx, order.ProductSpec{ID: 1, Stock: 1, Shards: 1, Lock: "token"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := svc.Buy(context.Background(), order.Purchase{UserID: 1, ProductID: 1, Hold: 300 * time.Millisecond})
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !mr.Exists(stock.LockKey(1, 0)) { // the purchase holds the shard's lock
		if time.Now().After(deadline) {
			t.Fatal("the purchase never took the lock")
		}
		time.Sleep(time.Millisecond)
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the purchase in flight: %v, want it completed", err)
		}
	default:
		t.Fatal("Close returned while a purchase was still in flight")
	}
	if _, _, err := svc.Buy(ctx, order.Purchase{UserID: 2, ProductID: 1}); !errors.Is(err, order.ErrClosing) {
		t.Errorf("a purchase after Close: %v, want ErrClosing", err)
	}
}
