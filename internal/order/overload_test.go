package order_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"seckill/internal/admission"
	"seckill/internal/catalogue"
	"seckill/internal/order"
	"seckill/internal/stock"
)

// refuseBuyer is a rate limit that refuses one buyer.
type refuseBuyer int64

func (r refuseBuyer) Allow(_ context.Context, buyer, _ int64) error {
	if buyer == int64(r) {
		return admission.ErrRateLimited
	}
	return nil
}

// A full limit sheds a purchase that would touch the stock, and nothing
// the service knows to refuse without it: bad input, an unknown product,
// a rate-limited buyer, a product this process knows is sold out. Lab
// purchases are never shed.
func TestBuyShedsOnlyWhatWouldTouchTheStock(t *testing.T) {
	g := admission.NewGradient(admission.GradientOptions{Initial: 1, Min: 1, Max: 1})
	f := newFixture(t, order.Options{Limit: g, Admit: refuseBuyer(99)})
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: 1, Shards: 1})
	f.Reset(catalogue.ProductSpec{ID: 2, Stock: 10, Shards: 1})
	f.Reset(catalogue.ProductSpec{ID: 3, Stock: 10, Shards: 1, Lab: true})
	ctx := t.Context()
	if _, _, err := f.svc.Buy(ctx, order.Purchase{UserID: 1, ProductID: 1}); err != nil {
		t.Fatalf("the last unit: %v", err)
	}
	if _, _, err := f.svc.Buy(ctx, order.Purchase{UserID: 2, ProductID: 1}); !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("after the last unit: %v, want ErrSoldOut", err)
	}
	if !f.svc.Catalogue().SoldOut(1) {
		t.Fatal("product 1 is not flagged sold out in this process")
	}
	if g.InFlight() != 0 || g.Admitted() != 2 {
		t.Fatalf("in flight %d, admitted %d after two purchases: want 0, 2", g.InFlight(), g.Admitted())
	}

	release, err := g.Acquire() // the limit is full from here on
	if err != nil {
		t.Fatal(err)
	}
	defer release(time.Millisecond, false)
	for _, c := range []struct {
		name string
		in   order.Purchase
		want error
	}{
		{"bad input", order.Purchase{UserID: -1, ProductID: 2}, order.ErrInvalid},
		{"an unknown product", order.Purchase{UserID: 3, ProductID: 404}, order.ErrNotFound},
		{"a rate-limited buyer", order.Purchase{UserID: 99, ProductID: 2}, admission.ErrRateLimited},
		{"a lab option on a product that is not a lab product", order.Purchase{UserID: 3, ProductID: 2, Lab: order.LabOptions{Lock: "none"}}, order.ErrLabOnly},
		{"a product known sold out", order.Purchase{UserID: 3, ProductID: 1}, stock.ErrSoldOut},
		{"a lab product", order.Purchase{UserID: 3, ProductID: 3}, nil},
		{"a product on sale", order.Purchase{UserID: 4, ProductID: 2}, admission.ErrOverloaded},
	} {
		if _, _, err := f.svc.Buy(ctx, c.in); !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("%s with the limit full: %v, want %v", c.name, err, c.want)
		}
	}
	if g.Shed() != 1 || g.InFlight() != 1 {
		t.Errorf("shed %d, in flight %d: want 1 shed (the product on sale) and the one held", g.Shed(), g.InFlight())
	}
}

// recorder is a limit that admits everything and keeps what the releases
// reported.
type recorder struct{ failed []bool }

func (r *recorder) Acquire() (func(time.Duration, bool), error) {
	return func(rtt time.Duration, failed bool) {
		if rtt < 0 {
			failed = true // an impossible latency is a failure of the test
		}
		r.failed = append(r.failed, failed)
	}, nil
}

// A purchase's release says failed only when no answer came: a sale and a
// sold out are answers, a lock not obtained in time is not.
func TestBuyReportsItsOutcomeToTheLimit(t *testing.T) {
	r := new(recorder)
	f := newFixture(t, order.Options{Limit: r, LockWait: 20 * time.Millisecond})
	p := f.Reset(catalogue.ProductSpec{ID: 1, Stock: 2, Shards: 1})
	ctx := t.Context()
	_, _, err := f.svc.Buy(ctx, order.Purchase{UserID: 1, ProductID: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Sold out, and the flag not set yet (no fallback), so the limit is asked.
	f.Reset(catalogue.ProductSpec{ID: 2, Stock: 0, Shards: 1, Fallback: new(bool)})
	if _, _, err := f.svc.Buy(ctx, order.Purchase{UserID: 1, ProductID: 2}); !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("an empty product: %v, want ErrSoldOut", err)
	}
	// The shard's lock held by someone else: no answer within the lock wait.
	lockKey := stock.Layout{ID: p.ID, Shards: p.Shards, Epoch: p.Epoch}.LockKey(0)
	if err := f.mr.Set(lockKey, "someone else"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.svc.Buy(ctx, order.Purchase{UserID: 2, ProductID: 1}); !errors.Is(err, stock.ErrLockTimeout) {
		t.Fatalf("a purchase with the lock held elsewhere: %v, want ErrLockTimeout", err)
	}
	if want := []bool{false, false, true}; len(r.failed) != len(want) || r.failed[0] != want[0] || r.failed[1] != want[1] || r.failed[2] != want[2] {
		t.Fatalf("releases reported failed = %v, want %v", r.failed, want)
	}
}
