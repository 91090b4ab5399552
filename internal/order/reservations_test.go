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
	if _, err := f.svc.Catalogue().Reset(ctx, catalogue.ProductSpec{ID: 1, Stock: 5, StartsAt: &opens, Reservation: true, Lab: true}); !errors.Is(err, catalogue.ErrInvalid) {
		t.Fatalf("reservations of a lab product, whose buyers anyone makes up: %v, want ErrInvalid", err)
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

// TestReservationsReadAtTheOpening: a herd of buyers released at once is
// checked against the reservations read at the opening, whoever comes
// first: in the opening's first ClockSkew a buyer missing from that read
// costs a read of their own row (one may have reserved on an instance
// whose clock is behind), after it nobody costs a read but the one final
// read of the reservations. Only those who reserved buy, and the stock is
// sold exactly.
func TestReservationsReadAtTheOpening(t *testing.T) {
	const reserved, buyers, units = 20, 60, 10
	for _, c := range []struct {
		name  string
		at    time.Duration // after the opening
		reads int64
	}{
		{"the opening second", order.ClockSkew / 2, 1 + buyers - reserved},
		{"after it", order.ClockSkew + time.Millisecond, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			opens := time.Date(2030, 5, 1, 10, 0, 0, 0, time.UTC)
			clk := newClock(opens.Add(-time.Minute))
			f := newFixture(t, order.Options{Now: clk.now})
			ctx := t.Context()
			f.Reset(catalogue.ProductSpec{ID: 1, Stock: units, StartsAt: &opens, Reservation: true})
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
			clk.set(opens.Add(c.at))
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
			if sold.Load() != units || unreservedSold.Load() != 0 || notRes.Load() != buyers-reserved {
				t.Errorf("sold %d (%d without a reservation), %d told not_reserved; want %d, 0, %d", sold.Load(), unreservedSold.Load(), notRes.Load(), units, buyers-reserved)
			}
			if n := reads.Load(); n != c.reads {
				t.Errorf("%d reads of the reservations for %d purchases; want %d", n, buyers, c.reads)
			}
			if a := f.Audit(1); a.Orders != units || a.Remaining != 0 || a.Verdict != "OK" {
				t.Errorf("audit %+v: want %d orders, none left", a, units)
			}
		})
	}
}

// TestAReservationLateOnAnotherClock: a reservation taken on an instance
// whose clock is behind, after the first read at the opening, is found by
// its buyer's own read in the opening's first ClockSkew and by the final
// read after it; one whose write ends after the opening, by the clock of
// the instance that took it, is taken back and its buyer told the
// reservations closed.
func TestAReservationLateOnAnotherClock(t *testing.T) {
	opens := time.Date(2030, 5, 1, 10, 0, 0, 0, time.UTC)
	clk := newClock(opens.Add(-time.Minute))
	f := newFixture(t, order.Options{Now: clk.now})
	ctx := t.Context()
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: 5, StartsAt: &opens, Reservation: true})
	if _, err := f.svc.Door().Reserve(ctx, 1, 7); err != nil {
		t.Fatal(err)
	}
	clk.set(opens)
	if _, _, err := f.svc.Buy(ctx, order.Purchase{UserID: 7, ProductID: 1}); err != nil {
		t.Fatalf("a buyer who reserved, at the opening: %v", err)
	}
	// Another instance, its clock half a second behind, takes buyer 8's.
	if err := f.db.Exec("INSERT INTO reservations (product_id, user_id, created_at) VALUES (1, 8, ?)", opens.Add(-time.Millisecond)).Error; err != nil {
		t.Fatal(err)
	}
	clk.set(opens.Add(order.ClockSkew / 2))
	if _, _, err := f.svc.Buy(ctx, order.Purchase{UserID: 8, ProductID: 1}); err != nil {
		t.Fatalf("a buyer who reserved on a clock behind, in the opening second: %v", err)
	}
	if err := f.db.Exec("INSERT INTO reservations (product_id, user_id, created_at) VALUES (1, 9, ?)", opens.Add(-time.Millisecond)).Error; err != nil {
		t.Fatal(err)
	}
	clk.set(opens.Add(order.ClockSkew))
	if _, _, err := f.svc.Buy(ctx, order.Purchase{UserID: 9, ProductID: 1}); err != nil {
		t.Fatalf("a buyer who reserved on a clock behind, after the opening second: %v", err)
	}

	// A write that ends after the opening: the clock passes it mid-write.
	f.Reset(catalogue.ProductSpec{ID: 2, Stock: 5, StartsAt: &opens, Reservation: true})
	clk.set(opens.Add(-time.Millisecond))
	err := f.db.Callback().Create().After("gorm:create").Register("a_slow_write", func(db *gorm.DB) {
		if db.Statement.Table == "reservations" {
			clk.set(opens)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Door().Reserve(ctx, 2, 10); !errors.Is(err, order.ErrReservationClosed) {
		t.Fatalf("a reservation written past the opening: %v, want ErrReservationClosed", err)
	}
	if n, err := f.svc.Door().Reservations(ctx, 2); err != nil || n != 0 {
		t.Errorf("%d reservations stand (%v), want the late one taken back", n, err)
	}
}
