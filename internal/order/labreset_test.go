package order_test

import (
	"testing"
	"time"

	"seckill/internal/catalogue"
	"seckill/internal/order"
	"seckill/internal/stock"
)

// A lab run that abandons a setnx lock (the course's SETNX lesson) leaves
// a key without expiry; resetting the lab product for its next run
// deletes it, or every run after would wait on that shard for ever. A lock
// with a lease is left to its lease, and a product that is not a lab
// product keeps what it has: nobody resets a real sale to free a lock.
func TestLabResetDropsAbandonedLocks(t *testing.T) {
	f := newFixture(t, order.Options{})
	lab := f.Reset(catalogue.ProductSpec{ID: 1, Stock: 5, Shards: 2, Lock: "setnx", Lab: true})
	abandon := order.LabOptions{Lock: "setnx", Faults: order.Faults{Abandon: true}}
	if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: 1, Lab: abandon}); err != nil {
		t.Fatal(err)
	}
	layout := stock.Layout{ID: lab.ID}
	var abandoned, leased string
	for i := range 2 {
		if f.mr.Exists(layout.LockKey(i)) {
			abandoned, leased = layout.LockKey(i), layout.LockKey(1-i)
		}
	}
	if abandoned == "" || f.mr.TTL(abandoned) != 0 {
		t.Fatalf("after an abandoning purchase: no lock key without expiry on either shard (%v)", f.mr.Keys())
	}
	// A live lock of another strategy, on the other shard: a lease.
	f.mr.Set(leased, "token-of-a-holder")
	f.mr.SetTTL(leased, time.Minute)

	f.Reset(catalogue.ProductSpec{ID: 1, Stock: 5, Shards: 2, Lock: "setnx", Lab: true})
	if f.mr.Exists(abandoned) {
		t.Errorf("the lab product's reset kept the abandoned lock %s", abandoned)
	}
	if !f.mr.Exists(leased) {
		t.Errorf("the lab product's reset deleted %s, a lock with a lease", leased)
	}
	// Its holder releases; both shards sell again, every buyer a unit.
	f.mr.Del(leased)
	for u := int64(2); u <= 6; u++ {
		if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: u, ProductID: 1, Lab: order.LabOptions{Lock: "setnx"}}); err != nil {
			t.Errorf("buyer %d after the reset: %v", u, err)
		}
	}

	real := f.Reset(catalogue.ProductSpec{ID: 2, Stock: 5, Shards: 1, Lock: "setnx"})
	key := stock.Layout{ID: real.ID}.LockKey(0)
	f.mr.Set(key, "1")
	f.Reset(catalogue.ProductSpec{ID: 2, Stock: 5, Shards: 1, Lock: "setnx"})
	if !f.mr.Exists(key) {
		t.Errorf("a reset of product 2, not a lab product, deleted its lock %s", key)
	}
}
