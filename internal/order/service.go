package order

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"seckill/internal/admission"
	"seckill/internal/catalogue"
	"seckill/internal/idgen"
	"seckill/internal/lock"
	"seckill/internal/outbox"
	"seckill/internal/stock"
)

// Outcomes a caller branches on, beside stock's ErrSoldOut,
// ErrAlreadyBought, ErrLockTimeout and ErrLeaseLost.
var (
	ErrNotFound = catalogue.ErrNotFound
	// ErrInvalid wraps every error caused by the request's content.
	ErrInvalid = catalogue.ErrInvalid
	// ErrLabOnly: a purchase asked for a lab option (another lock or mode,
	// a hold, a fault) on a product that is not a lab product.
	ErrLabOnly = errors.New("order: lab option on a product that is not a lab product")
	// ErrUnknownMode: no mode of the table has the name asked for.
	ErrUnknownMode = errors.New("order: unknown mode")
	// ErrRebuilding: Redis lost the product's stock and it is being rebuilt
	// from the orders; nothing was sold, try again shortly.
	ErrRebuilding = errors.New("order: stock being rebuilt")
	// ErrClosing: the service is shutting down and takes no new purchase.
	ErrClosing = errors.New("order: shutting down")
	// ErrCrashed: the lab fault crash_after_take stopped the purchase
	// between its take and its order, as a process that died there would.
	ErrCrashed = errors.New("order: the purchase stopped after its take (injected crash)")
	// ErrNoPaths: a product asks for purchase paths on a service built
	// without Options.Paths.
	ErrNoPaths = errors.New("order: no purchase paths")
)

// Options configure a Service. Every field has a working default.
type Options struct {
	// LockTTL is the lease of the distributed locks. Default: lock.DefaultTTL.
	LockTTL time.Duration
	// LockWait is how long a purchase waits for a held lock. Default: 0, fail fast.
	LockWait time.Duration
	// Admit lets a buyer's purchase in, or refuses it (a rate limit),
	// before the purchase touches the stock. Default: none, all let in.
	Admit Admitter
	// Paths redeems the purchase path tokens of the products that ask for
	// them (admission.Paths). Default: none, and such products sell
	// nothing (ErrNoPaths).
	Paths Paths
	// Captchas checks the captchas that guard the path tokens of the
	// products that ask for one. Default: none, and such products issue
	// no token (ErrNoPaths).
	Captchas Captchas
	// PerAddress limits the purchases of products that are not lab
	// products per client address (admission.PerAddress). Default: none.
	PerAddress AddressAdmitter
	// Limit sheds purchases beyond the service's concurrency limit
	// (admission.Gradient), after every refusal known without it and before
	// the stock; never those of lab products, nor of a product this process
	// knows is sold out. Default: none, nothing shed.
	Limit Limiter
	// Step bounds one round trip to Redis or the database, the client's
	// retries included: the unit of the purchase's time budget. Default: 4s.
	Step time.Duration
	// ReconcileEvery is how often the reconciler passes over the products:
	// the same as reconcile.Options.Every (app sets both from one setting).
	// A buyer told "sold out for now" is told to ask again after it.
	// Default: DefaultReconcileEvery.
	ReconcileEvery time.Duration
	// Repairs is the reconciler a purchase asks whether its product must
	// be repaired first (a Redis that came back without takes) and tells
	// that the product sells here. Default: none, nothing is repaired: for
	// tests of the purchase alone. A deployment must wire one (app does).
	Repairs Repairs
	// DueEvery is how often the process polls the payment deadlines.
	// Default: DefaultDueEvery; negative turns the polling off.
	DueEvery time.Duration
	// DueLease is how long a claimed deadline stays claimed: a process
	// that dies holding claimed deadlines loses them for this long, after
	// which another claims them. Default: DefaultDueLease.
	DueLease time.Duration
	// Deployment names the database the orders are written to, so that the
	// async mode's consumers of processes on other databases sharing the
	// Redis leave this one's queue alone (stock.Store.ForDeployment).
	// Default: none, one queue per Redis.
	Deployment string
	// IDs draws the order ids. The caller that hands one in closes it
	// after the service. Default: segments reserved in db
	// (idgen.Segments), which the service closes.
	IDs IDs
	// Stock is the store of the products' stock. Default: one on rdb and
	// db, for Deployment.
	Stock *stock.Store
	// Lease is the lock of the leases that keep background jobs to one
	// process at a time (a rebuild). Default: the pool's token lock.
	Lease lock.Locker
	// Broker carries the mq mode's orders to the consumers. Default: none,
	// and the mq mode is refused.
	Broker *outbox.Broker
	// Now is the clock a product's sale window is read on (Buy), and the
	// catalogue's (catalogue.Options.Now). Default: time.Now.
	Now func() time.Time
	// StockBack is told each product whose sold-out flag this process
	// cleared (a unit came back, a reset, a rebuild), off the purchase
	// path: the edge gate learned "sold out" from this process and must
	// unlearn it. It must not block. Default: none.
	StockBack func(id int64)
	// Log receives what went wrong beyond the client's reach. Default: slog.Default().
	Log *slog.Logger
}

// Repairs is what a purchase asks of the reconciler (reconcile.Reconciler).
type Repairs interface {
	// Touch notes that this process sells the product.
	Touch(product int64)
	// AwaitRepair returns once the product was repaired after the last
	// change of its Redis seen, with that change's number; ErrRebuilding
	// when the repair takes longer than a step.
	AwaitRepair(ctx context.Context, product int64) (gen uint64, err error)
	// ChangedSince reports whether Redis changed since gen: a take that ran
	// meanwhile may have taken a unit a forgotten take still holds.
	ChangedSince(gen uint64) bool
}

// noRepairs is Options.Repairs's default: a service that sees no change.
type noRepairs struct{}

func (noRepairs) Touch(int64)                                        {}
func (noRepairs) AwaitRepair(context.Context, int64) (uint64, error) { return 0, nil }
func (noRepairs) ChangedSince(uint64) bool                           { return false }

// Paths issues and spends buyers' one-time purchase path tokens
// (admission.Paths). Redeem's key is the purchase's idempotency key, with
// which a retry of the same purchase redeems its token again.
type Paths interface {
	Issue(ctx context.Context, buyer, product int64) (admission.PathToken, error)
	Redeem(ctx context.Context, buyer, product int64, token, key string) error
	CloseRetries(ctx context.Context, buyer, product int64, key string) error
}

// Captchas checks a captcha's answer for what it was made for, once
// (admission.Captchas).
type Captchas interface {
	Solve(ctx context.Context, id, answer, bind string) error
}

// AddressAdmitter decides whether a client address's request is let in.
type AddressAdmitter interface {
	Allow(ctx context.Context, addr string) error
}

// Admitter decides whether a buyer's purchase of a product is let in
// (admission.PerBuyer).
type Admitter interface {
	Allow(ctx context.Context, buyer, product int64) error
}

// Limiter admits a request within a concurrency limit or refuses it at
// once (admission.ErrOverloaded). The admitted request calls release once,
// with its latency and whether a backend failed it.
type Limiter interface {
	Acquire() (release func(rtt time.Duration, failed bool), err error)
}

// Defaults of Options.
const (
	DefaultStep           = 4 * time.Second
	DefaultReconcileEvery = 10 * time.Second
	DefaultDueEvery       = 100 * time.Millisecond
	DefaultDueLease       = 5 * time.Second
)

// Limits on what a request may ask for.
const (
	MaxHold      = 10 * time.Second
	MaxClockSkew = time.Hour
	MaxKeyLen    = 64
)

// Budget bounds a purchase in time, phase by phase: every phase runs on a
// deadline of its own, and the HTTP server's write timeout is derived from
// the whole (app does so), so that no purchase outlives its response.
type Budget struct {
	LockWait time.Duration
	MaxHold  time.Duration
	Step     time.Duration
}

// Take bounds the take: waiting for the lock, the hold, and the lock's and
// the stock's round trips (acquire, read, write, release).
func (b Budget) Take() time.Duration { return b.LockWait + b.MaxHold + 4*b.Step }

// Record bounds writing the order: the insert, and settling an unknown
// outcome (a void row and a read).
func (b Budget) Record() time.Duration { return 3 * b.Step }

// GiveBackWait is how long a give-back waits for the shard's lock: longer
// than any live holder holds it.
func (b Budget) GiveBackWait() time.Duration { return b.MaxHold + 2*b.Step }

// GiveBack bounds returning a unit: the wait for the lock and its round trips.
func (b Budget) GiveBack() time.Duration { return b.GiveBackWait() + 3*b.Step }

// Purchase bounds a whole purchase: the order id, the take (twice when the
// layout changed under it), the record and a give-back.
func (b Budget) Purchase() time.Duration {
	return b.Step + 2*b.Take() + b.Record() + b.GiveBack()
}

// IDs draws order ids: idgen.Segments, or for a comparison idgen.Redis.
type IDs interface {
	Next(ctx context.Context) (idgen.ID, error)
}

var (
	_ IDs = (*idgen.Segments)(nil)
	_ IDs = (*idgen.Redis)(nil)
)

// Service sells products: it takes a unit as the product's mode says and
// writes its order (purchase.go, record.go, mode_*.go). Its other jobs are
// parts of their own, which it builds and closes, each holding what it
// uses: the Catalogue of products, the Door a purchase passes first
// (door.go), the Lifecycle of orders (pay, cancel, expire) and the Queue's
// view of queued orders. The reconciler (stranded takes, audits, repairs)
// is a package of its own above this one (internal/reconcile).
type Service struct {
	db    *gorm.DB
	rdb   redis.UniversalClient
	stock *stock.Store
	// streams reads the stock's queue for the process's consumers, which
	// share it (NewConsumer).
	streams *outbox.RedisStreams
	ids     IDs
	// ownIDs is ids when the service made them (Options.IDs unset): it
	// closes them.
	ownIDs *idgen.Segments
	// marks are the unsettled marks Redis has not taken yet (marks.go).
	marks *marks
	// told counts the orders the process told of (told.go).
	told    *told
	opt     Options
	log     *slog.Logger
	flight  *flight
	returns returns

	cat   *catalogue.Catalogue
	life  *Lifecycle
	queue *Queue
	door  *Door
	reads *Reads
}

// flight is the purchases and background jobs in flight, which Close waits
// for: once a unit is taken, the backends must stay open until it is in an
// order or back in the store.
type flight struct {
	mu      sync.Mutex
	closing bool
	working sync.WaitGroup
	stop    chan struct{} // closed by Close: the schedules end
}

// enter registers a purchase or a job in flight; it fails once Close
// began. The caller ends it with f.working.Done.
func (f *flight) enter() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return ErrClosing
	}
	f.working.Add(1)
	return nil
}

// land refuses new work, ends the schedules and waits for the work in
// flight; it reports false when an earlier call did so already.
func (f *flight) land() bool {
	f.mu.Lock()
	if f.closing {
		f.mu.Unlock()
		return false
	}
	f.closing = true
	close(f.stop)
	f.mu.Unlock()
	f.working.Wait()
	return true
}

// returns puts the units of takes that will not become orders back in the
// store (giveBack), and tells the catalogue.
type returns struct {
	stock  *stock.Store
	cat    *catalogue.Catalogue
	budget Budget
	log    *slog.Logger
}

// Lifecycle moves orders through their lives: paid, cancelled, expired
// unpaid with the unit returned.
type Lifecycle struct {
	db     *gorm.DB
	stock  *stock.Store
	cat    *catalogue.Catalogue
	log    *slog.Logger
	flight *flight
	// From Options: the give-back's lock, the path tokens to close, the
	// deadlines' schedule.
	lockTTL            time.Duration
	budget             Budget
	paths              Paths
	dueEvery, dueLease time.Duration
	returns            returns
	// orderOf reads an order and its product as a buyer may see them
	// (Reads.orderOf).
	orderOf func(ctx context.Context, id idgen.ID, b Buyer) (Order, catalogue.Product, error)
}

// Queue shows the orders queued and not written yet: the async mode's
// pending index and streams.
type Queue struct{ stock *stock.Store }

// Catalogue is the service's catalogue of products.
func (s *Service) Catalogue() *catalogue.Catalogue { return s.cat }

// Lifecycle is the service's part that pays, cancels and expires orders.
func (s *Service) Lifecycle() *Lifecycle { return s.life }

// Queue is the service's view of the queued orders.
func (s *Service) Queue() *Queue { return s.queue }

// Reads is the service's part that reads orders, for their buyers and
// for the operator.
func (s *Service) Reads() *Reads { return s.reads }

// NewService returns a service on db and rdb, locking with locks, and
// starts following other processes' notices and the payment deadlines;
// Close stops them. It runs no reconciler: a deployment builds one
// (reconcile.New), hands it in as Options.Repairs and starts it on the
// service (app does so); without one, stranded takes stay stranded and a
// Redis that forgot takes is not repaired. The tables must exist (Migrate). The caller keeps
// ownership of db, rdb and locks.
func NewService(db *gorm.DB, rdb redis.UniversalClient, locks *lock.Pool, opt Options) (*Service, error) {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.Step <= 0 {
		opt.Step = DefaultStep
	}
	if opt.ReconcileEvery == 0 {
		opt.ReconcileEvery = DefaultReconcileEvery
	}
	if opt.Repairs == nil {
		opt.Repairs = noRepairs{}
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.DueEvery == 0 {
		opt.DueEvery = DefaultDueEvery
	}
	if opt.DueLease <= 0 {
		opt.DueLease = DefaultDueLease
	}
	if opt.Lease == nil {
		l, err := locks.Get("token")
		if err != nil {
			return nil, fmt.Errorf("the leases' lock: %w", err)
		}
		opt.Lease = l
	}
	s := &Service{db: db, rdb: rdb, opt: opt, log: opt.Log, stock: opt.Stock, ids: opt.IDs,
		flight: &flight{stop: make(chan struct{})}}
	if s.stock == nil {
		s.stock = stock.NewStore(rdb, db).ForDeployment(opt.Deployment)
	}
	s.streams = outbox.NewRedisStreams(s.stock.Queue())
	s.marks = newMarks(s.stock.Ledgers(), opt.Step, opt.Log)
	s.flight.working.Go(func() { s.marks.run(s.flight.stop) })
	s.told = newTold(s.stock.Ledgers(), outbox.UniqueName(), opt.Step, opt.Log)
	s.flight.working.Go(func() { s.told.run(s.flight.stop) })
	if s.ids == nil {
		s.ownIDs = idgen.NewSegments(&idgen.SQLBlocks{DB: db}, "order")
		s.ids = s.ownIDs
	}
	// The store is set up before the catalogue's notices may reach it.
	if opt.StockBack != nil {
		s.stock.Flags().OnCleared(opt.StockBack)
	}
	s.stock.ClaimWindow(opt.budget().Purchase())
	// A lease is taken with Options.Lease (the token lock, not a copy).
	lease := func(ctx context.Context, key string, ttl time.Duration) (func(), error) {
		return lock.Try(ctx, opt.Lease, key, ttl, opt.Step, opt.Log)
	}
	cat, err := catalogue.New(db, rdb, catalogue.Options{
		Stock: s.stock, Locks: locks, Mode: sells, Sold: sold, Lease: lease, Log: opt.Log,
		Enter: s.Enter, Now: opt.Now,
	})
	if err != nil {
		return nil, err
	}
	s.cat = cat
	s.queue = &Queue{stock: s.stock}
	s.reads = &Reads{db: db, cat: cat, queue: s.queue}
	s.returns = returns{stock: s.stock, cat: cat, budget: opt.budget(), log: opt.Log}
	s.life = &Lifecycle{db: db, stock: s.stock, cat: cat, log: opt.Log, flight: s.flight, returns: s.returns, orderOf: s.reads.orderOf,
		lockTTL: opt.LockTTL, budget: opt.budget(), paths: opt.Paths, dueEvery: opt.DueEvery, dueLease: opt.DueLease}
	s.door = &Door{cat: cat, buyers: opt.Admit, paths: opt.Paths, captchas: opt.Captchas, perAddress: opt.PerAddress,
		limit: opt.Limit, now: opt.Now,
		marks: s.marks, ledgers: s.stock.Ledgers(), reserved: newReservations(db, opt.Now)}
	if opt.DueEvery > 0 {
		s.flight.working.Go(s.life.expireOnSchedule)
	}
	return s, nil
}

// Budget is the service's purchase time budget.
func (s *Service) Budget() Budget { return s.opt.budget() }

func (o Options) budget() Budget {
	return Budget{LockWait: o.LockWait, MaxHold: MaxHold, Step: o.Step}
}

// Close refuses new purchases, stops the schedules, waits for the purchases
// and jobs in flight (each is bounded in time) and stops following notices.
// It closes neither the database, nor Redis, nor the lock pool.
func (s *Service) Close() error {
	if !s.flight.land() {
		return nil
	}
	if s.ownIDs != nil {
		s.ownIDs.Close()
	}
	return s.cat.Close()
}

// RedisConnected is the service's part of the Redis client's OnConnect
// hook (app wires it, on one Redis and on a cluster's every node, beside
// the reconciler's ServerSeen): the catalogue reads the durability again.
// The order ids need nothing of Redis (idgen.Segments).
func (s *Service) RedisConnected(context.Context, *redis.Conn) error {
	s.cat.Reconnected()
	s.told.rewrite() // a server that lost them (a failover, a restart)
	return nil
}

// Enter registers a job of another part (a reconciler's pass, a repair)
// as work in flight, which Close waits for; it fails with ErrClosing once
// Close began. done ends it.
func (s *Service) Enter() (done func(), err error) {
	if err := s.flight.enter(); err != nil {
		return nil, err
	}
	return s.flight.working.Done, nil
}

// ExpireOverdue cancels p's unpaid orders well past their due time (see
// Lifecycle): the reconciler's pass does it for the deadlines that never
// reached the delay queue.
func (s *Service) ExpireOverdue(ctx context.Context, p catalogue.Product) (int, error) {
	return s.life.expireOverdue(ctx, p)
}

// sells is what the catalogue knows of a mode.
func sells(name string) (catalogue.Sells, error) {
	m, err := ModeNamed(name)
	if err != nil {
		return catalogue.Sells{}, err
	}
	return catalogue.Sells{Store: m.Store(), Queued: m.Queued}, nil
}

// sold lists the takes of p's live orders in its current sale, read in
// tx: what the catalogue lays a lost layout out again from.
func sold(tx *gorm.DB, p catalogue.Product) ([]stock.Entry, error) {
	var orders []Order
	if err := tx.Where("product_id = ? AND sale = ? AND status IN ?", p.ID, p.Sale, live).Find(&orders).Error; err != nil {
		return nil, err
	}
	entries := make([]stock.Entry, 0, len(orders))
	for _, o := range orders {
		entries = append(entries, stock.Entry{User: o.UserID, Order: o.ID, Key: o.Key, Shard: o.Shard, At: o.CreatedAt})
	}
	return entries, nil
}

// migrationWait bounds how long Migrate waits for another process's
// migration of the same database: an index built over many orders may take
// minutes.
const migrationWait = 5 * time.Minute

// Migrate creates or updates the tables. Processes started at once on one
// MySQL database take turns, under a named lock of that database: GORM
// reads the schema and then creates what it did not find, so two at once
// both create, and one fails ("Table already exists"). SQLite is the
// file of one process.
func Migrate(ctx context.Context, db *gorm.DB) (err error) {
	if db.Dialector.Name() == "mysql" {
		sqlDB, err := db.DB()
		if err != nil {
			return err
		}
		m, err := lock.NewMySQL(sqlDB, "mysql")
		if err != nil {
			return err
		}
		key := "seckill:migrate:" + db.Migrator().CurrentDatabase()
		lease, err := m.Acquire(ctx, key, lock.Options{Wait: migrationWait})
		if err != nil {
			return fmt.Errorf("waiting for another process's migration of the database: %w", err)
		}
		defer func() { err = errors.Join(err, lease.Release(context.WithoutCancel(ctx))) }()
	}
	return migrate(ctx, db)
}

func migrate(ctx context.Context, db *gorm.DB) error {
	m := db.WithContext(ctx).Migrator()
	// Until sales existed, one order per user per product was for ever:
	// that index would refuse a buyer in every later sale.
	if m.HasTable(&Order{}) && m.HasIndex(&Order{}, "idx_product_user") {
		if err := m.DropIndex(&Order{}, "idx_product_user"); err != nil {
			return fmt.Errorf("dropping the orders' old one-per-user index: %w", err)
		}
	}
	if err := db.WithContext(ctx).AutoMigrate(&catalogue.Product{}, &Order{}, &reservation{}); err != nil {
		return fmt.Errorf("migrating products, orders and reservations: %w", err)
	}
	if err := idgen.MigrateBlocks(ctx, db); err != nil {
		return err
	}
	// Rows from before buyers were recorded are live orders of sale 1.
	err := db.WithContext(ctx).Model(&Order{}).Where("buyer IS NULL AND status = ?", Unpaid).
		Update("buyer", gorm.Expr("user_id")).Error
	if err != nil {
		return fmt.Errorf("recording the buyers of earlier orders: %w", err)
	}
	return stock.Migrate(ctx, db)
}

// queued looks an order up in the async mode's pending index.
func (q *Queue) queued(ctx context.Context, id idgen.ID) (Order, bool, error) {
	p, found, err := q.stock.Queue().Pending(ctx, id)
	switch {
	case err != nil || !found:
		return Order{}, found, err
	case p.Failed != "":
		return Order{ID: id, ProductID: p.Product, UserID: p.User, Status: Failed, Reason: p.Failed}, true, nil
	}
	return Order{ID: id, ProductID: p.Product, Sale: p.Sale, UserID: p.User, Shard: p.Shard, Mode: asyncMode.Name,
		Status: Pending, CreatedAt: id.Time()}, true, nil
}

// Backlog is the async mode's queue, over every product.
func (q *Queue) Backlog(ctx context.Context) (stock.Backlog, error) {
	return q.stock.Queue().Backlog(ctx)
}

// DeliveredTo counts, per consumer name, the queued orders delivered to it
// and not acknowledged yet (see stock.Store.DeliveredTo).
func (q *Queue) DeliveredTo(ctx context.Context) (map[string]int64, error) {
	return q.stock.Queue().DeliveredTo(ctx)
}

// Streams lists the order streams of the service's deployment.
func (q *Queue) Streams(ctx context.Context) ([]string, error) { return q.stock.Queue().Streams(ctx) }
