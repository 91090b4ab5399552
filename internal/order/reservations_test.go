package order_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"seckill/internal/catalogue"
	"seckill/internal/order"
)

// TestReservations: a product with reservations takes one per buyer until
// its opening (a second call finds the first), counts them across a reset
// that resizes the sale, refuses them from the opening, and then sells only
// to the buyers who reserved, before any stock is touched.
func TestReservations(t *testing.T) {
	opens := time.Date(2030, 5, 1, 10, 0, 0, 0, time.UTC)
	clk := newClock(opens.Add(-time.Hour))
	f := newFixture(t, order.Options{Now: clk.now})
	ctx, door := t.Context(), f.svc.Door()
	if _, err := f.svc.Catalogue().Reset(ctx, catalogue.ProductSpec{ID: 1, Stock: 5, Reservation: true}); !errors.Is(err, catalogue.ErrInvalid) {
		t.Fatalf("reservations without starts_at: %v, want ErrInvalid", err)
	}
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: 5, StartsAt: &opens, Reservation: true})
	f.Reset(catalogue.ProductSpec{ID: 2, Stock: 5, StartsAt: &opens})

	first, err := door.Reserve(ctx, 1, 7)
	if err != nil || !first.Created || first.Count != 1 {
		t.Fatalf("first reservation: %+v, %v; want created, count 1", first, err)
	}
	clk.add(time.Minute)
	again, err := door.Reserve(ctx, 1, 7)
	if err != nil || again.Created || again.Count != 1 || !again.At.Equal(first.At) {
		t.Fatalf("the same buyer again: %+v, %v; want the first reservation (at %s), count 1", again, err, first.At)
	}
	if r, err := door.Reserve(ctx, 1, 8); err != nil || !r.Created || r.Count != 2 {
		t.Fatalf("a second buyer: %+v, %v; want created, count 2", r, err)
	}
	if _, err := door.Reserve(ctx, 2, 7); !errors.Is(err, order.ErrNoReservation) {
		t.Errorf("a product without reservations: %v, want ErrNoReservation", err)
	}
	// The operator sizes the sale from the count: a reset keeps them.
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: 2, StartsAt: &opens, Reservation: true})
	if n, err := door.Reservations(ctx, 1); err != nil || n != 2 {
		t.Fatalf("after a reset: %d reservations (%v), want 2", n, err)
	}

	clk.set(opens)
	if _, err := door.Reserve(ctx, 1, 9); !errors.Is(err, order.ErrReservationClosed) {
		t.Fatalf("reserving at the opening: %v, want ErrReservationClosed", err)
	}
	if _, _, err := f.svc.Buy(ctx, order.Purchase{UserID: 9, ProductID: 1}); !errors.Is(err, order.ErrNotReserved) {
		t.Fatalf("a buyer who did not reserve, in the opening second: %v, want ErrNotReserved", err)
	}
	if _, _, err := f.svc.Buy(ctx, order.Purchase{UserID: 7, ProductID: 1}); err != nil {
		t.Fatalf("a buyer who reserved, in the opening second: %v", err)
	}
	clk.set(opens.Add(order.ClockSkew))
	if _, _, err := f.svc.Buy(ctx, order.Purchase{UserID: 9, ProductID: 1}); !errors.Is(err, order.ErrNotReserved) {
		t.Fatalf("a buyer who did not reserve, after it: %v, want ErrNotReserved", err)
	}
	if _, _, err := f.svc.Buy(ctx, order.Purchase{UserID: 8, ProductID: 1}); err != nil {
		t.Fatalf("a buyer who reserved, after it: %v", err)
	}
	if _, _, err := f.svc.Buy(ctx, order.Purchase{UserID: 3, ProductID: 2}); err != nil {
		t.Errorf("a product without reservations sells to anyone: %v", err)
	}
	if a := f.Audit(1); a.Orders != 2 || a.Remaining != 0 || a.Verdict != "OK" {
		t.Errorf("audit %+v: want the two who reserved sold the two units", a)
	}
}

// TestReservationsReadOnceAfterTheOpening: from ClockSkew after the
// opening, a herd of buyers released at once is checked against the
// reservations read from the database once, whoever comes first; only
// those who reserved buy, and the stock is sold exactly.
func TestReservationsReadOnceAfterTheOpening(t *testing.T) {
	opens := time.Date(2030, 5, 1, 10, 0, 0, 0, time.UTC)
	clk := newClock(opens.Add(-time.Minute))
	f := newFixture(t, order.Options{Now: clk.now})
	ctx := t.Context()
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: 10, StartsAt: &opens, Reservation: true, Lab: true})
	const reserved, buyers = 20, 60
	for b := int64(1); b <= reserved; b++ {
		if _, err := f.svc.Door().Reserve(ctx, 1, b); err != nil {
			t.Fatal(err)
		}
	}
	var reads atomic.Int64
	err := f.db.Callback().Query().After("gorm:query").Register("count_reservation_reads", func(db *gorm.DB) {
		if db.Statement.Table == "reservations" {
			reads.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	clk.set(opens.Add(order.ClockSkew + time.Millisecond))
	var (
		start          = make(chan struct{})
		wg             sync.WaitGroup
		sold, notRes   atomic.Int64
		unreservedSold atomic.Int64
	)
	for b := int64(1); b <= buyers; b++ {
		wg.Go(func() {
			<-start
			_, _, err := f.svc.Buy(ctx, order.Purchase{UserID: b, ProductID: 1})
			switch {
			case err == nil:
				sold.Add(1)
				if b > reserved {
					unreservedSold.Add(1)
				}
			case errors.Is(err, order.ErrNotReserved):
				notRes.Add(1)
				if b <= reserved {
					t.Errorf("buyer %d reserved and was told not_reserved", b)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if sold.Load() != 10 || unreservedSold.Load() != 0 || notRes.Load() != buyers-reserved {
		t.Errorf("sold %d (%d without a reservation), %d told not_reserved; want 10, 0, %d", sold.Load(), unreservedSold.Load(), notRes.Load(), buyers-reserved)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("%d reads of the reservations for %d purchases; want 1", n, buyers)
	}
	if a := f.Audit(1); a.Orders != 10 || a.Remaining != 0 || a.Verdict != "OK" {
		t.Errorf("audit %+v: want 10 orders, none left", a)
	}
}
