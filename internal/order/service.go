package order

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"seckill/internal/idgen"
	"seckill/internal/lock"
	"seckill/internal/stock"
)

// Outcomes a caller branches on, beside stock's ErrSoldOut,
// ErrAlreadyBought, ErrLockTimeout and ErrLeaseLost.
var (
	ErrNotFound    = errors.New("order: not found")
	ErrRateLimited = errors.New("order: rate limited")
	// ErrInvalid wraps every error caused by the request's content.
	ErrInvalid = errors.New("order: invalid request")
)

// Limits on what a request may ask for.
const (
	MaxStock = 10_000_000
	MaxHold  = 10 * time.Second
)

// Options configure a Service.
type Options struct {
	// LockTTL is the lease of the distributed locks. Default: lock.DefaultTTL.
	LockTTL time.Duration
	// LockWait is how long a purchase waits for a held lock. Default: 0, fail fast.
	LockWait time.Duration
	// RateLimit allows one purchase request per user per period. Default: 0, off.
	RateLimit time.Duration
	// Nodes are the independent Redis nodes for redlock. Default: none.
	Nodes []*redis.Client
	// LockSQL is the connection pool of the mysql lock strategy. A waiter
	// blocks in GET_LOCK on a connection of its own, so sharing the orders'
	// bounded pool would let waiters starve the holder's order insert.
	// Default: the orders' pool.
	LockSQL *sql.DB
	// Log receives what went wrong beyond the client's reach. Default: slog.Default().
	Log *slog.Logger
}

// Service sells products.
type Service struct {
	db       *gorm.DB
	rdb      *redis.Client
	stock    *stock.Store
	ids      *idgen.Redis
	opt      Options
	backends lock.Backends

	products sync.Map // int64 → Product: a product's defaults, read on every purchase

	mu      sync.Mutex
	lockers map[string]lock.Locker // one per strategy, shared by all requests of the process

	sub  *redis.PubSub
	done chan struct{} // closed when followResets returns

	// Purchases in flight, which Close waits for: once a unit is taken, the
	// backends must stay open until it is in an order or back in the store.
	flight  sync.Mutex
	closing bool
	buying  sync.WaitGroup
}

// Notices between the processes that sell the same products.
const (
	// resetChannel carries the id of a product that was reset, so that every
	// process drops its cached copy and its sold-out flag.
	resetChannel = "seckill:product-reset"
	// returnChannel carries the id of a product a unit was given back to,
	// so that every process drops its sold-out flag.
	returnChannel = "seckill:stock-returned"
)

// ErrClosing: the service is shutting down and takes no new purchase.
var ErrClosing = errors.New("order: shutting down")

// Migrate creates or updates the tables.
func Migrate(ctx context.Context, db *gorm.DB) error {
	if err := db.WithContext(ctx).AutoMigrate(&Product{}, &Order{}); err != nil {
		return fmt.Errorf("migrating products and orders: %w", err)
	}
	return stock.Migrate(ctx, db)
}

// NewService returns a service on db and rdb and starts listening for other
// processes' product resets; Close stops it. The tables must exist (Migrate).
func NewService(db *gorm.DB, rdb *redis.Client, opt Options) (*Service, error) {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("getting the database handle: %w", err)
	}
	s := &Service{
		db:    db,
		rdb:   rdb,
		stock: stock.NewStore(rdb, db),
		ids:   idgen.NewRedis(rdb, "order"),
		opt:   opt,
		backends: lock.Backends{
			Redis: rdb, Nodes: opt.Nodes, SQL: cmp.Or(opt.LockSQL, sqlDB), SQLDialect: db.Dialector.Name(),
		},
		lockers: make(map[string]lock.Locker),
		done:    make(chan struct{}),
	}
	ctx := context.Background()
	s.sub = rdb.Subscribe(ctx, resetChannel, returnChannel)
	for range 2 { // the confirmations: no notice is missed after these
		if _, err := s.sub.Receive(ctx); err != nil {
			s.sub.Close()
			return nil, fmt.Errorf("subscribing to %s and %s: %w", resetChannel, returnChannel, err)
		}
	}
	go s.followResets()
	return s, nil
}

// followResets runs until Close closes the subscription, which closes its
// channel. After a reconnection the subscription is confirmed again; notices
// sent while it was down are lost, so then every cached product and flag is
// dropped.
func (s *Service) followResets() {
	defer close(s.done)
	for m := range s.sub.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Subscription:
			s.products.Clear()
			s.stock.ClearAllSoldOut()
		case *redis.Message:
			id, err := strconv.ParseInt(m.Payload, 10, 64)
			if err != nil {
				s.opt.Log.Warn("ignoring a malformed notice", "channel", m.Channel, "payload", m.Payload)
				continue
			}
			if m.Channel == resetChannel {
				s.products.Delete(id)
			}
			s.stock.ClearSoldOut(id)
		}
	}
}

// Close refuses new purchases, waits for those in flight to finish (each is
// bounded in time), stops following notices and closes the lockers that hold
// resources. It does not close the database or Redis, which the caller owns.
func (s *Service) Close() error {
	s.flight.Lock()
	s.closing = true
	s.flight.Unlock()
	s.buying.Wait()
	err := s.sub.Close()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := []error{err}
	for name, l := range s.lockers {
		if c, ok := l.(io.Closer); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("closing lock %s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Locker returns the process's instance of the named strategy.
func (s *Service) Locker(name string) (lock.Locker, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.lockers[name]; ok {
		return l, nil
	}
	l, err := lock.New(name, s.backends)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	s.lockers[name] = l
	return l, nil
}

// Product returns a product, from the process's cache when it has it.
func (s *Service) Product(ctx context.Context, id int64) (Product, error) {
	if p, ok := s.products.Load(id); ok {
		return p.(Product), nil
	}
	var p Product
	err := s.db.WithContext(ctx).Take(&p, id).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Product{}, fmt.Errorf("%w: product %d", ErrNotFound, id)
	}
	if err != nil {
		return Product{}, fmt.Errorf("reading product %d: %w", id, err)
	}
	s.products.Store(id, p)
	return p, nil
}

// ProductSpec describes a product to create or reset.
type ProductSpec struct {
	ID       int64
	Name     string
	Stock    int
	Shards   int    // default 5
	Lock     string // default "token"
	Mode     string // default "rmw"
	Fallback *bool  // default true
}

// Reset creates a product or lays it out afresh: its orders are deleted and
// its stock is set to spec.Stock. Meant for a quiet product: purchases in
// flight during a reset may be counted against either layout.
func (s *Service) Reset(ctx context.Context, spec ProductSpec) (Product, error) {
	p, err := s.validate(spec)
	if err != nil {
		return Product{}, err
	}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Save(&p).Error; err != nil {
			return err
		}
		return tx.Where("product_id = ?", p.ID).Delete(&Order{}).Error
	})
	if err != nil {
		return Product{}, fmt.Errorf("saving product %d: %w", p.ID, err)
	}
	if err := s.stock.Layout(ctx, p.stock(), p.Initial); err != nil {
		return Product{}, err
	}
	s.products.Store(p.ID, p)
	if err := s.rdb.Publish(ctx, resetChannel, p.ID).Err(); err != nil {
		return Product{}, fmt.Errorf("announcing the reset of product %d: %w", p.ID, err)
	}
	return p, nil
}

func (s *Service) validate(spec ProductSpec) (Product, error) {
	invalid := func(format string, a ...any) (Product, error) {
		return Product{}, fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	p := Product{ID: spec.ID, Name: spec.Name, Initial: spec.Stock, Shards: spec.Shards,
		Lock: spec.Lock, Mode: spec.Mode, Fallback: spec.Fallback == nil || *spec.Fallback}
	if p.ID <= 0 {
		return invalid("id must be a positive integer")
	}
	if p.Initial < 0 || p.Initial > MaxStock {
		return invalid("stock must be between 0 and %d", MaxStock)
	}
	if p.Shards == 0 {
		p.Shards = 5
	}
	if p.Shards < 1 || p.Shards > stock.MaxShards {
		return invalid("shards must be between 1 and %d", stock.MaxShards)
	}
	if p.Name == "" {
		p.Name = "product " + strconv.FormatInt(p.ID, 10)
	}
	if len(p.Name) > 200 {
		return invalid("name must be at most 200 bytes")
	}
	if p.Lock == "" {
		p.Lock = "token"
	}
	if p.Mode == "" {
		p.Mode = string(stock.RMW)
	}
	mode, err := stock.ParseMode(p.Mode)
	if err != nil {
		return Product{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, err := s.Locker(p.Lock); err != nil {
		return Product{}, err
	}
	p.Store = string(mode.Store())
	return p, nil
}

// Fault injects the lock ladder's failures into one purchase.
type Fault struct {
	// Abandon leaves the lock held, as a holder that crashed would.
	Abandon bool
	// Lock carries the strategy-level faults: a crash between SETNX and
	// EXPIRE, a skewed client clock.
	Lock lock.Fault
}

// MaxClockSkew bounds the clock skew a request may inject.
const MaxClockSkew = time.Hour

// Purchase is one buyer's request.
type Purchase struct {
	UserID, ProductID int64
	Lock, Mode        string        // "" uses the product's default
	Hold              time.Duration // a pause inside the critical section
	Fault             Fault
}

// Receipt tells how a purchase went, whether or not it succeeded.
type Receipt struct {
	Lock, Mode string
	LockWait   time.Duration
	LeaseLost  bool // the lock had expired by the time it was released
}

// Buy sells one unit of a product to a user. Once a unit is taken the
// purchase no longer follows ctx's cancellation — a client that hangs up must
// not strand a unit between the store and the orders — but it is bounded in
// time all the same.
func (s *Service) Buy(ctx context.Context, in Purchase) (Order, Receipt, error) {
	var rc Receipt
	if in.UserID <= 0 || in.ProductID <= 0 {
		return Order{}, rc, fmt.Errorf("%w: user_id and product_id must be positive integers", ErrInvalid)
	}
	if in.Hold < 0 || in.Hold > MaxHold {
		return Order{}, rc, fmt.Errorf("%w: hold must be between 0 and %s", ErrInvalid, MaxHold)
	}
	if skew := in.Fault.Lock.ClockSkew; skew < -MaxClockSkew || skew > MaxClockSkew {
		return Order{}, rc, fmt.Errorf("%w: clock skew must be within ±%s", ErrInvalid, MaxClockSkew)
	}
	p, err := s.Product(ctx, in.ProductID)
	if err != nil {
		return Order{}, rc, err
	}
	rc.Lock, rc.Mode = cmp.Or(in.Lock, p.Lock), cmp.Or(in.Mode, p.Mode)
	mode, err := stock.ParseMode(rc.Mode)
	if err != nil {
		return Order{}, rc, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	locker, err := s.Locker(rc.Lock)
	if err != nil {
		return Order{}, rc, err
	}
	// Checked before the rate limit, so that bad input costs the buyer nothing.
	if err := p.stock().Accepts(mode); err != nil {
		return Order{}, rc, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := s.limit(ctx, in.UserID); err != nil {
		return Order{}, rc, err
	}
	s.flight.Lock()
	if s.closing {
		s.flight.Unlock()
		return Order{}, rc, ErrClosing
	}
	s.buying.Add(1)
	s.flight.Unlock()
	defer s.buying.Done()

	budget := s.opt.LockWait + in.Hold + 10*time.Second
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
	defer cancel()
	req := stock.Request{
		Product: p.stock(), UserID: in.UserID, Mode: mode, Locker: locker,
		Lock: lock.Options{TTL: s.opt.LockTTL, Wait: s.opt.LockWait, Fault: in.Fault.Lock},
		Hold: in.Hold, Abandon: in.Fault.Abandon, GiveBackWait: MaxHold + 5*time.Second,
	}
	taken, err := s.stock.Take(ctx, req)
	rc.LockWait, rc.LeaseLost = taken.LockWait, taken.LeaseLost
	if err != nil {
		return Order{}, rc, err
	}
	if taken.ReleaseErr != nil {
		s.opt.Log.Warn("the lock was not released after the unit was taken; it will expire",
			"product", p.ID, "shard", taken.Shard, "error", taken.ReleaseErr)
	}
	o, err := s.record(ctx, in, rc, taken)
	if err != nil {
		s.giveBack(ctx, req, taken, err)
		return Order{}, rc, err
	}
	return o, rc, nil
}

// giveBack returns the unit of a purchase whose order was not written. It
// runs on a context of its own: the purchase's may be the very thing that
// ran out.
func (s *Service) giveBack(ctx context.Context, req stock.Request, t stock.Taken, cause error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), req.GiveBackWait+10*time.Second)
	defer cancel()
	if err := s.stock.GiveBack(ctx, req, t); err != nil {
		s.opt.Log.Error("a unit could not be given back after a failed order",
			"product", req.Product.ID, "shard", t.Shard, "user", req.UserID, "order_error", cause, "error", err)
		return
	}
	if err := s.rdb.Publish(ctx, returnChannel, req.Product.ID).Err(); err != nil {
		s.opt.Log.Warn("other processes were not told of a unit given back; their sold-out flag stays until a reset",
			"product", req.Product.ID, "error", err)
	}
}

// record draws an order id and writes the order.
func (s *Service) record(ctx context.Context, in Purchase, rc Receipt, t stock.Taken) (Order, error) {
	id, err := s.ids.Next(ctx)
	if err != nil {
		return Order{}, fmt.Errorf("drawing an order id: %w", err)
	}
	o := Order{ID: id, ProductID: in.ProductID, UserID: in.UserID, Shard: t.Shard, Lock: rc.Lock, Mode: rc.Mode}
	err = s.db.WithContext(ctx).Create(&o).Error
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return Order{}, fmt.Errorf("%w: user %d, product %d", stock.ErrAlreadyBought, in.UserID, in.ProductID)
	}
	if err != nil {
		// The INSERT may have committed with its answer lost; giving the
		// unit back then would put it in both places. The id is ours, so ask.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		var n int64
		if cerr := s.db.WithContext(cctx).Model(&Order{}).Where("id = ?", int64(id)).Count(&n).Error; cerr == nil && n == 1 {
			return o, nil
		}
		return Order{}, fmt.Errorf("writing order %s: %w", id, err)
	}
	return o, nil
}

// limit lets one purchase request per user through per period: SET NX PX,
// one round trip, and the key expires by itself.
func (s *Service) limit(ctx context.Context, user int64) error {
	if s.opt.RateLimit <= 0 {
		return nil
	}
	ok, err := s.rdb.SetNX(ctx, "seckill:rate:"+strconv.FormatInt(user, 10), 1, s.opt.RateLimit).Result()
	if err != nil {
		return fmt.Errorf("checking the rate limit of user %d: %w", user, err)
	}
	if !ok {
		return fmt.Errorf("%w: one order request per %s", ErrRateLimited, s.opt.RateLimit)
	}
	return nil
}

// Order returns an order by id.
func (s *Service) Order(ctx context.Context, id idgen.ID) (Order, error) {
	var o Order
	err := s.db.WithContext(ctx).Take(&o, int64(id)).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Order{}, fmt.Errorf("%w: order %s", ErrNotFound, id)
	}
	if err != nil {
		return Order{}, fmt.Errorf("reading order %s: %w", id, err)
	}
	return o, nil
}
