package order_test

import (
	"errors"
	"testing"
	"time"

	"seckill/internal/catalogue"
	"seckill/internal/idgen"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/reconcile"
	"seckill/internal/stock"
	"seckill/internal/testkit/testenv"
)

// TestAMarkElsewhereUnmakesTheFinalSoldOut: a process answers "sold out"
// from memory, as final, only while it knows no unit of a purchase whose
// outcome is unknown may come back. Another process marking such a
// purchase tells it (the mark's notice), and its next refusal is "sold
// out for now" with a time to ask again: never final while a mark stands.
// The seller trusts what it read for an hour, so only the notice can
// tell it.
func TestAMarkElsewhereUnmakesTheFinalSoldOut(t *testing.T) {
	rdb, db, _ := testenv.Local(t)
	locks, err := lock.OpenPool(t.Context(), lock.PoolConfig{Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locks.Close() })
	seller, _ := testenv.Orders(t, db, rdb, locks, order.Options{DueEvery: -1,
		Stock: stock.NewStore(rdb, db).SettledFor(time.Hour)}, reconcile.Options{})
	other, _ := testenv.Orders(t, db, rdb, locks, order.Options{DueEvery: -1}, reconcile.Options{})
	p, err := other.Catalogue().Reset(t.Context(), catalogue.ProductSpec{ID: 1, Stock: 1, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := seller.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: 1}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := seller.Buy(t.Context(), order.Purchase{UserID: 2, ProductID: 1}); !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("the second buyer: %v, want sold out", err)
	}
	if err := seller.Door().Refusal(1, false); !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("the refusal known without a round trip: %v, want sold out", err)
	}
	if err := seller.Door().Refusal(1, true); err != nil {
		t.Errorf("a retry's refusal: %v, want none (its record is read)", err)
	}

	if err := stock.NewStore(rdb, db).Ledgers().MarkUnsettled(t.Context(), p.Stock().Layout, idgen.ID(99)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the seller to hear of the mark", func() bool { return seller.Door().Refusal(1, false) == nil })
	_, _, err = seller.Buy(t.Context(), order.Purchase{UserID: 3, ProductID: 1})
	var later *order.SoldOutForNowError
	if !errors.As(err, &later) || later.RetryAfter <= 0 {
		t.Errorf("a buyer after the mark: %v, want sold out for now with a time to ask again", err)
	}
}
