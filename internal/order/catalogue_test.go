package order_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"seckill/internal/catalogue"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/reconcile"
	"seckill/internal/testkit/testenv"
)

// A product another process made is missing from this process's cache
// until its first read. At an opening every purchase arriving before that
// read returns asks for it: they share one read of the database, not one
// each (a stampede on the products table at the second it opens). The
// first asker's cancellation fails none of the others.
func TestAMissingProductIsReadOnce(t *testing.T) {
	f := newFixture(t, order.Options{})
	f.Reset(catalogue.ProductSpec{ID: 7, Stock: 10})
	locks, err := lock.OpenPool(t.Context(), lock.PoolConfig{Redis: f.rdb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locks.Close() })
	other, _ := testenv.Orders(t, f.db, f.rdb, locks, order.Options{}, reconcile.Options{})

	// Every read of the products table is counted and held until the
	// burst has started, so that the burst meets the first read in flight.
	var reads atomic.Int64
	started := make(chan struct{})
	if err := f.db.Callback().Query().Before("gorm:query").Register("count_product_reads", func(db *gorm.DB) {
		if db.Statement.Table == "products" {
			reads.Add(1)
			<-started
			time.Sleep(20 * time.Millisecond)
		}
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.db.Callback().Query().Remove("count_product_reads") })

	const askers = 200
	first, cancel := context.WithCancel(t.Context())
	var ready, done sync.WaitGroup
	ready.Add(askers)
	errs := make(chan error, askers)
	for i := range askers {
		done.Go(func() {
			ctx := t.Context()
			if i == 0 {
				ctx = first
			}
			ready.Done()
			ready.Wait()
			p, err := other.Catalogue().Product(ctx, 7)
			if err == nil && p.ID != 7 {
				t.Errorf("asked for product 7, got %d", p.ID)
			}
			errs <- err
		})
	}
	ready.Wait()
	time.Sleep(50 * time.Millisecond) // the askers are in Product
	cancel()                          // the first asker gives up
	close(started)
	done.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("an asker was refused: %v", err)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("%d askers of a product missing from the cache read the database %d times, want once", askers, n)
	}
}

// A product found missing is answered missing from the cache for a while:
// a client naming products that do not exist does not reach the database
// once per request. A product created right after is found at once: its
// creation drops the miss.
func TestAMissIsCachedUntilTheProductIsMade(t *testing.T) {
	f := newFixture(t, order.Options{})
	var reads atomic.Int64
	if err := f.db.Callback().Query().Before("gorm:query").Register("count_product_reads", func(db *gorm.DB) {
		if db.Statement.Table == "products" {
			reads.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.db.Callback().Query().Remove("count_product_reads") })

	cat := f.svc.Catalogue()
	for i := range 2 {
		if _, err := cat.Product(t.Context(), 42); !errors.Is(err, catalogue.ErrNotFound) {
			t.Fatalf("read %d of a product that does not exist: %v, want ErrNotFound", i+1, err)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("two reads of a missing product read the products table %d times, want once (the miss cached)", n)
	}
	f.Reset(catalogue.ProductSpec{ID: 42, Stock: 3})
	if p, err := cat.Product(t.Context(), 42); err != nil || p.ID != 42 {
		t.Fatalf("the product made after the miss: %+v %v, want it found at once", p, err)
	}
}
