// Package reconcile keeps the promise that every unit of stock is in the
// store, in the queue or in an order when a purchase cannot keep it alone:
// it finds the takes that never became orders and gives their units back
// (a pass), takes back the units of orders whose takes a Redis forgot (a
// repair, before the product sells again), and audits a sale, counting the
// stock, the queue and the orders against each other.
//
// It sits above the order service: it reads the orders' rows and asks the
// service (Orders) to settle an unknown outcome and to expire overdue
// orders; the service asks it back only through order.Repairs, which a
// Reconciler is. docs/INVARIANT.md tells the whole story.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"seckill/internal/catalogue"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/outbox"
	"seckill/internal/stock"
)

// Orders is what the reconciler asks of the order service.
type Orders interface {
	// Catalogue is the service's catalogue of products.
	Catalogue() *catalogue.Catalogue
	// Budget bounds a purchase in time; a take younger than a whole
	// purchase may still become an order.
	Budget() order.Budget
	// Enter registers a pass or a repair as work in flight of the service,
	// which its Close waits for; done ends it.
	Enter() (done func(), err error)
	// Settle settles an order whose write may or may not have landed: a
	// void row takes its id, or the row found there is returned.
	Settle(ctx context.Context, o order.Order) (order.Order, error)
	// ExpireOverdue cancels the sale's unpaid orders well past their due
	// time, returning their units.
	ExpireOverdue(ctx context.Context, p catalogue.Product) (int, error)
}

// Options configure a Reconciler.
type Options struct {
	// DB holds the orders; Redis the stock; Stock is the store of the
	// products' stock. Required.
	DB    *gorm.DB
	Redis redis.UniversalClient
	Stock *stock.Store
	// Lease keeps a product's pass to one process at a time: the token
	// lock. Required.
	Lease lock.Locker
	// Every is how often the reconciler passes over the products this
	// process sells. Default: DefaultEvery; negative turns the schedule
	// off (Reconcile still works on demand).
	Every time.Duration
	// Grace is how old a take must be before it is judged stranded. It
	// must outlast any purchase still in flight. Default: the budget of a
	// whole purchase (order.Budget.Purchase).
	Grace time.Duration
	// LockTTL is the lease of the shard locks a give-back takes.
	// Default: lock.DefaultTTL.
	LockTTL time.Duration
	// Step bounds one round trip. Default: order.DefaultStep.
	Step time.Duration
	// Broker is the mq mode's; without it, an mq take is not judged.
	Broker *outbox.Broker
	// Log receives what went wrong beyond the client's reach. Default:
	// slog.Default().
	Log *slog.Logger
}

// The reconciler is the service's Repairs, and the service is its Orders.
var (
	_ order.Repairs = (*Reconciler)(nil)
	_ Orders        = (*order.Service)(nil)
)

// DefaultEvery is Options.Every's default.
const DefaultEvery = order.DefaultReconcileEvery

// Reconciler finds takes with no order and settles them, audits a sale,
// and repairs the shards of a Redis that came back without takes. It is
// the order service's order.Repairs.
type Reconciler struct {
	db     *gorm.DB
	rdb    redis.UniversalClient
	stock  *stock.Store
	cat    *catalogue.Catalogue
	orders Orders
	opt    Options
	log    *slog.Logger

	touched sync.Map // int64 → time.Time: products sold here
	passes  sync.Map // int64 → *passState: the last scheduled pass's, for the next
	gate    repairGate
	// returned counts the stranded units this reconciler gave back.
	returned atomic.Int64

	stop  chan struct{} // closed by Close: the schedules end
	loops sync.WaitGroup
	once  sync.Once
}

// Returned is how many stranded units this reconciler has given back to
// their shards since it started: takes whose order was never written.
func (rec *Reconciler) Returned() int64 { return rec.returned.Load() }

// New returns a reconciler; Start hands it the order service and starts
// its schedules. It is built before the service, which asks it for repairs
// (order.Options.Repairs).
func New(opt Options) (*Reconciler, error) {
	if opt.DB == nil || opt.Redis == nil || opt.Stock == nil || opt.Lease == nil {
		return nil, errors.New("reconcile: Options.DB, Redis, Stock and Lease are required")
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.Every == 0 {
		opt.Every = DefaultEvery
	}
	if opt.Step <= 0 {
		opt.Step = order.DefaultStep
	}
	return &Reconciler{db: opt.DB, rdb: opt.Redis, stock: opt.Stock, opt: opt, log: opt.Log, stop: make(chan struct{})}, nil
}

// Start hands the reconciler the service whose orders it settles, and
// starts the schedules: the passes, and on a cluster the watch of the
// slots' masters. Close stops them. It must be called once, before the
// service sells and before any other method but the connect hook's
// ServerSeen: a repair asked for before it fails with ErrClosing.
func (rec *Reconciler) Start(orders Orders) {
	rec.orders, rec.cat = orders, orders.Catalogue()
	if rec.opt.Grace <= 0 {
		rec.opt.Grace = orders.Budget().Purchase()
	}
	if rec.opt.Every > 0 {
		rec.loops.Go(rec.reconcileOnSchedule)
	}
	if cc, ok := rec.rdb.(*redis.ClusterClient); ok {
		rec.loops.Go(func() { rec.watchMasters(cc) })
	}
}

// Close stops the schedules and waits for them. A pass or a repair in
// flight is the service's work (Orders.Enter): the service's Close waits
// for it.
func (rec *Reconciler) Close() error {
	rec.once.Do(func() { close(rec.stop) })
	rec.loops.Wait()
	return nil
}

// enter registers a pass or a repair with the service; it fails before
// Start, and once the service closes.
func (rec *Reconciler) enter() (func(), error) {
	if rec.orders == nil {
		return nil, fmt.Errorf("%w: the reconciler has not started", order.ErrClosing)
	}
	return rec.orders.Enter()
}

// Touch notes that this process sold product id: the schedule passes over
// it for the next hour. A purchase calls it: it stores at most once a
// minute per product.
func (rec *Reconciler) Touch(id int64) {
	if at, ok := rec.touched.Load(id); ok && time.Since(at.(time.Time)) < time.Minute {
		return
	}
	rec.touched.Store(id, time.Now())
}

// lease takes key for ttl with Options.Lease (the token lock, not a copy),
// unless another holds it; it returns the release, or nil when another
// holds it.
func (rec *Reconciler) lease(ctx context.Context, key string, ttl time.Duration) (func(), error) {
	return lock.Try(ctx, rec.opt.Lease, key, ttl, rec.opt.Step, rec.log)
}
