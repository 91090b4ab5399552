package testenv

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"seckill/internal/catalogue"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/outbox"
	"seckill/internal/reconcile"
)

// Sale is an order service and its reconciler on a miniredis and an
// in-memory SQLite (Local): what its tests check is the service's own
// bookkeeping. The real servers' part is in internal/server's and the
// fault tests.
type Sale struct {
	T   testing.TB
	Svc *order.Service
	Rec *reconcile.Reconciler
	RDB *redis.Client
	DB  *gorm.DB
	MR  *miniredis.Miniredis
}

// NewSale starts a Sale (see Orders); a purchase waits a second for a
// held lock unless opt says otherwise.
func NewSale(t testing.TB, opt order.Options, ropt reconcile.Options) *Sale {
	t.Helper()
	rdb, db, mr := Local(t)
	locks, err := lock.OpenPool(t.Context(), lock.PoolConfig{Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locks.Close() })
	if opt.LockWait == 0 {
		opt.LockWait = time.Second
	}
	svc, rec := Orders(t, db, rdb, locks, opt, ropt)
	return &Sale{T: t, Svc: svc, Rec: rec, RDB: rdb, DB: db, MR: mr}
}

// Reset lays a product out.
func (f *Sale) Reset(spec catalogue.ProductSpec) catalogue.Product {
	f.T.Helper()
	p, err := f.Svc.Catalogue().Reset(f.T.Context(), spec)
	if err != nil {
		f.T.Fatal(err)
	}
	return p
}

// Audit audits a product.
func (f *Sale) Audit(id int64) reconcile.Audit {
	f.T.Helper()
	_, a, err := f.Rec.Audit(f.T.Context(), id)
	if err != nil {
		f.T.Fatal(err)
	}
	return a
}

// WaitAudit polls the audit until cond holds.
func (f *Sale) WaitAudit(id int64, what string, cond func(reconcile.Audit) bool) reconcile.Audit {
	f.T.Helper()
	var a reconcile.Audit
	WaitFor(f.T, what, func() bool {
		a = f.Audit(id)
		return cond(a)
	})
	return a
}

// Consumer starts a consumer of the async mode's queue, polling briskly.
func (f *Sale) Consumer(opt outbox.Options) *outbox.Consumer {
	f.T.Helper()
	if opt.Block == 0 {
		opt.Block = 20 * time.Millisecond
	}
	if opt.ClaimEvery == 0 {
		opt.ClaimEvery = 50 * time.Millisecond
	}
	c := order.NewConsumer(f.DB, f.Svc, opt)
	c.Start()
	f.T.Cleanup(func() { c.Close() })
	return c
}

// WaitFor polls cond until it holds, for at most 5s.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s never happened", what)
		}
		time.Sleep(time.Millisecond)
	}
}
