package catalogue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"seckill/internal/api"
	"seckill/internal/durability"
	"seckill/internal/lock"
	"seckill/internal/stock"
)

// Notices between the processes that sell the same products.
const (
	// resetChannel carries the id of a product that was laid out anew (a
	// reset or a rebuild): every process drops its cached copy and flag.
	resetChannel = "seckill:product-reset"
	// returnChannel carries the id of a product a unit was given back to:
	// every process drops its sold-out flag.
	returnChannel = "seckill:stock-returned"
)

// Sells is what the catalogue must know of a sale mode.
type Sells struct {
	// Store is where the mode takes its units from.
	Store stock.Where
	// Queued: the mode answers its buyers before their orders' rows are
	// written, so its answers rest on what Redis keeps.
	Queued bool
}

// Options are what a Catalogue is built from; every field but Log is
// required.
type Options struct {
	Stock *stock.Store
	// Locks is the pool whose names a product's lock must be among.
	Locks *lock.Pool
	// Mode tells of a sale mode by name; an unknown name is an error
	// wrapping ErrInvalid.
	Mode func(name string) (Sells, error)
	// Sold lists the takes of the live orders of p's current sale, read in
	// tx: what a rebuild lays the stock out from.
	Sold func(tx *gorm.DB, p Product) ([]stock.Entry, error)
	// Lease takes a lease on key across processes for ttl; it returns nil
	// and no error when another process holds it.
	Lease func(ctx context.Context, key string, ttl time.Duration) (release func(), err error)
	// Enter registers a rebuild as work in flight with the catalogue's
	// owner, which waits for it before it closes what a rebuild uses; it
	// fails once the owner is closing, and the rebuild is not started.
	Enter func() (done func(), err error)
	Log   *slog.Logger
	// Now is the clock a sale window is read on: a reset of a product
	// that opens later than now warms it (Warm). Default: time.Now.
	Now func() time.Time
}

// Catalogue keeps the products: their specs and layouts, a cache of them
// kept fresh by other processes' notices, resets and rebuilds.
type Catalogue struct {
	db    *gorm.DB
	rdb   redis.UniversalClient
	opt   Options
	log   *slog.Logger
	stock *stock.Store
	// durable is what Redis keeps of an answered write (durability.go).
	durable *durability.Watch

	products   sync.Map           // int64 → Product: the cache
	known      sync.Map           // int64 → bool: whether a product this process has cached is a lab product (see Known)
	absent     sync.Map           // int64 → time.Time: ids read and found missing, until then (MissTTL)
	misses     singleflight.Group // one read of a product missing from the cache at a time
	rebuilding sync.Map           // int64 → struct{}: rebuilds running in this process

	closeOnce sync.Once
	closeErr  error

	sub  *redis.PubSub
	done chan struct{} // closed when followNotices returns
}

// New returns the catalogue of the products in db, laid out in opt.Stock,
// following the other processes' notices on rdb until Close.
func New(db *gorm.DB, rdb redis.UniversalClient, opt Options) (*Catalogue, error) {
	if opt.Stock == nil || opt.Locks == nil || opt.Mode == nil || opt.Sold == nil || opt.Lease == nil || opt.Enter == nil {
		return nil, errors.New("catalogue: Options.Stock, Locks, Mode, Sold, Lease and Enter are required")
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	c := &Catalogue{db: db, rdb: rdb, opt: opt, log: cmp.Or(opt.Log, slog.Default()), stock: opt.Stock, done: make(chan struct{})}
	c.durable = durability.NewWatch(rdb, 0, c.durabilityDropped)
	if err := c.subscribe(); err != nil {
		return nil, err
	}
	return c, nil
}

// Close stops following notices. It closes neither the database nor
// Redis; the rebuilds in flight are the owner's to wait for (Options.Enter).
func (c *Catalogue) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = c.sub.Close()
		<-c.done
	})
	return c.closeErr
}

func (c *Catalogue) subscribe() error {
	ctx := context.Background()
	channels := []string{resetChannel, returnChannel, stock.MarkedChannel}
	c.sub = c.rdb.Subscribe(ctx, channels...)
	for range channels { // the confirmations: no notice is missed after these
		if _, err := c.sub.Receive(ctx); err != nil {
			c.sub.Close()
			return fmt.Errorf("subscribing to %s: %w", strings.Join(channels, ", "), err)
		}
	}
	go c.followNotices()
	return nil
}

// followNotices runs until Close closes the subscription. After a
// reconnection the subscription is confirmed again; notices sent while it
// was down are lost, so then every cached product and flag is dropped, and
// every product known to have no unsettled orders is asked about again.
func (c *Catalogue) followNotices() {
	defer close(c.done)
	for m := range c.sub.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Subscription:
			c.products.Clear()
			c.absent.Clear()
			c.stock.Flags().ClearAll()
			c.stock.Ledgers().ForgetSettled()
		case *redis.Message:
			id, err := strconv.ParseInt(m.Payload, 10, 64)
			if err != nil {
				c.log.Warn("ignoring a malformed notice", "channel", m.Channel, "payload", m.Payload)
				continue
			}
			switch m.Channel {
			case stock.MarkedChannel:
				c.stock.Ledgers().Marked(id)
				continue // a mark returns no unit: the flag stays
			case resetChannel:
				c.products.Delete(id)
				c.absent.Delete(id)
			}
			c.stock.Flags().Clear(id)
		}
	}
}

// announce tells every process (this one included) that a product changed.
func (c *Catalogue) announce(ctx context.Context, channel string, id int64) {
	if err := c.rdb.Publish(ctx, channel, id).Err(); err != nil {
		c.log.Warn("other processes were not told; their caches and sold-out flags stay until they reconnect",
			"channel", channel, "product", id, "error", err)
	}
}

// Returned tells every process (this one included) that a unit of product
// id came back: each drops its sold-out flag.
func (c *Catalogue) Returned(ctx context.Context, id int64) { c.announce(ctx, returnChannel, id) }

// SoldOut reports this process's sold-out flag for a product: set, its
// purchases are refused without a look at Redis until a unit comes back.
func (c *Catalogue) SoldOut(id int64) bool { return c.stock.Flags().SoldOut(id) }

// Product returns a product, from the process's cache when it has it. An
// id read and found missing less than MissTTL ago is ErrNotFound without a
// read: a client naming products that do not exist reaches the database
// once per id and MissTTL, whatever its rate. A product created since is
// found at once all the same: its reset (Reset, CreateIfAbsent) drops the
// miss here and, through its notice, in every process.
func (c *Catalogue) Product(ctx context.Context, id int64) (Product, error) {
	if p, ok := c.products.Load(id); ok {
		return p.(Product), nil
	}
	if c.knownMissing(id) {
		return Product{}, notFound(id)
	}
	// A product this process has not seen yet is asked for by every
	// purchase that arrives before its first read returns: at an opening,
	// thousands. They share one read. It runs apart from the first asker's
	// cancellation, which must not fail the others, bounded by missRead.
	v, err, _ := c.misses.Do(strconv.FormatInt(id, 10), func() (any, error) {
		if p, ok := c.products.Load(id); ok { // a read that finished since
			return p.(Product), nil
		}
		if c.knownMissing(id) {
			return Product{}, notFound(id)
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), missRead)
		defer cancel()
		return c.Refresh(rctx, id)
	})
	if err != nil {
		return Product{}, err
	}
	return v.(Product), nil
}

// Cached returns product id from the process's cache, without a read: ok
// is false when the cache does not hold it, and the error ErrNotFound when
// it was read and found missing less than MissTTL ago.
func (c *Catalogue) Cached(id int64) (p Product, ok bool, err error) {
	if v, ok := c.products.Load(id); ok {
		return v.(Product), true, nil
	}
	if c.knownMissing(id) {
		return Product{}, false, notFound(id)
	}
	return Product{}, false, nil
}

// Known reports, without a round trip, whether this process has held
// product id (ok), and whether it is a lab product, which an id is for
// ever (a reset cannot change it). A product stays known after a notice
// drops its cached copy: the read that follows is one per reset, not one
// per client's request.
func (c *Catalogue) Known(id int64) (lab, ok bool) {
	v, ok := c.known.Load(id)
	if !ok {
		return false, false
	}
	return v.(bool), true
}

// keep caches p: it exists, and is known.
func (c *Catalogue) keep(p Product) {
	c.products.Store(p.ID, p)
	c.known.Store(p.ID, p.Lab)
	c.absent.Delete(p.ID)
}

// MissTTL is how long a product found missing is answered missing without
// a read: short, as a product another process creates is found by this one
// at its notice or, if the notice is lost, after MissTTL at most.
const MissTTL = time.Second

// missRead bounds the shared read of a product missing from the cache.
const missRead = 5 * time.Second

func notFound(id int64) error { return fmt.Errorf("%w: product %d", ErrNotFound, id) }

// knownMissing reports whether id was found missing less than MissTTL ago.
func (c *Catalogue) knownMissing(id int64) bool {
	until, ok := c.absent.Load(id)
	return ok && time.Now().Before(until.(time.Time))
}

// Refresh reads a product from the database and caches it, or its absence
// for MissTTL.
func (c *Catalogue) Refresh(ctx context.Context, id int64) (Product, error) {
	var p Product
	err := c.db.WithContext(ctx).Take(&p, id).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		c.products.Delete(id)
		c.known.Delete(id)
		c.absent.Store(id, time.Now().Add(MissTTL))
		return Product{}, notFound(id)
	}
	if err != nil {
		return Product{}, fmt.Errorf("reading product %d: %w", id, err)
	}
	c.keep(p)
	return p, nil
}

// Locker is the pool's lock of a name; an unknown or unsupported one is
// an error wrapping ErrInvalid.
func (c *Catalogue) Locker(name string) (lock.Locker, error) {
	l, err := c.opt.Locks.Get(name)
	if errors.Is(err, lock.ErrUnknownStrategy) || errors.Is(err, lock.ErrUnsupported) {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return l, err
}

// Reset creates a product, or starts a new sale of it: the stock is laid
// out afresh under a new layout epoch, and the orders stay, attributed to
// the sale they were made in. A purchase in flight across a reset either
// wrote its order before it (in the old sale) or is refused after it and
// tried again in the new one: the new sale's audit is exact.
func (c *Catalogue) Reset(ctx context.Context, spec ProductSpec) (Product, error) {
	return c.reset(ctx, spec, false)
}

// reset is Reset; createOnly refuses (ErrExists) a product that exists.
func (c *Catalogue) reset(ctx context.Context, spec ProductSpec, createOnly bool) (Product, error) {
	p, err := c.validate(spec)
	if err != nil {
		return Product{}, err
	}
	if err := c.checkDurable(ctx, p); err != nil {
		return Product{}, fmt.Errorf("product %d: %w", p.ID, err)
	}
	if err := c.replicateByDefault(ctx, &p); err != nil {
		return Product{}, fmt.Errorf("product %d: %w", p.ID, err)
	}
	// A layout recorded in Redis by a process whose database did not know
	// the product: the new epoch must not reuse its keys.
	marker, _, err := c.stock.Ledgers().ReadMarker(ctx, p.ID)
	if err != nil {
		return Product{}, err
	}
	var old *Product
	err = c.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var terr error
		old, terr = c.layOut(ctx, tx, &p, marker.Epoch, spec.Reset, createOnly)
		return terr
	})
	if err != nil {
		return Product{}, fmt.Errorf("resetting product %d: %w", p.ID, err)
	}
	c.keep(p)
	c.stock.Flags().Clear(p.ID)
	c.announce(ctx, resetChannel, p.ID)
	if old != nil && old.Store == string(stock.InRedis) {
		if err := c.stock.Drop(ctx, old.Stock().Layout); err != nil {
			c.log.Warn("the keys of a past layout stay in Redis", "product", p.ID, "epoch", old.Epoch, "error", err)
		}
	}
	if p.Lab {
		// A lesson's run may abandon a lock without expiry (fault abandon
		// on setnx): the shard's next run would find it held for ever.
		shards := p.Shards
		if old != nil {
			shards = max(shards, old.Shards)
		}
		if n, err := c.stock.DropAbandonedLocks(ctx, p.ID, shards); err != nil {
			c.log.Warn("a lock a past run abandoned may hold a shard", "product", p.ID, "error", err)
		} else if n > 0 {
			c.log.Info("deleted locks without expiry a past run abandoned", "product", p.ID, "locks", n)
		}
	}
	if p.StartsAt != nil && p.StartsAt.After(c.opt.Now()) {
		if err := c.Warm(ctx, p); err != nil {
			c.log.Warn("the sale opens cold: its first purchases load what the warm-up did not", "product", p.ID, "error", err)
		}
	}
	return p, nil
}

// layOut is reset's transaction: it lays p's stock out under its next
// sale and epoch, and returns the product it replaced, if any.
func (c *Catalogue) layOut(ctx context.Context, tx *gorm.DB, p *Product, markerEpoch int64, explicit, createOnly bool) (*Product, error) {
	levels := stock.Split(p.Initial, p.Shards)
	// Shard rows first, then the product: the db mode's purchases lock
	// in that order too, so the two cannot deadlock.
	if err := stock.LayOutSQL(tx, p.Stock(), levels); err != nil {
		return nil, err
	}
	var cur, old *Product = &Product{}, nil
	err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Take(cur, p.ID).Error
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		p.Sale, p.Epoch = 1, markerEpoch+1
	case err != nil:
		return nil, fmt.Errorf("reading product %d: %w", p.ID, err)
	case createOnly:
		return nil, fmt.Errorf("%w: product %d was created meanwhile", ErrExists, p.ID)
	case cur.Lab != p.Lab:
		return nil, fmt.Errorf("%w: product %d was created with lab %v; that is fixed (use another id)", ErrInvalid, p.ID, cur.Lab)
	case !cur.Lab && !explicit && (cur.Lock != p.Lock || cur.Mode != p.Mode):
		// A POST that looks like a create must not change how a
		// real sale is sold (issue 25: lock none, then oversold).
		return nil, fmt.Errorf("%w: product %d is sold under lock %s and mode %s; send them again, or \"reset\": true to change them",
			ErrResetRequired, p.ID, cur.Lock, cur.Mode)
	default:
		old = cur
		p.Sale, p.Epoch = cur.Sale+1, max(cur.Epoch, markerEpoch)+1
	}
	// Laid out before the commit publishes the new epoch: no purchase
	// can find the epoch without its keys.
	if err := c.stock.LayOut(ctx, p.Stock(), levels, p.Initial); err != nil {
		return nil, err
	}
	return old, tx.Save(p).Error
}

// CreateIfAbsent creates a product unless it exists, in the database or in
// Redis: a process started on a fresh database beside a Redis that another
// process sells the product from must not lay its stock out again.
//
// Processes started at once may create it at once: their transactions
// deadlock or one's insert finds the other's row, and the one refused
// reads again, once, and finds it.
func (c *Catalogue) CreateIfAbsent(ctx context.Context, spec ProductSpec) (Product, error) {
	p, err := c.createIfAbsent(ctx, spec)
	if errors.Is(err, gorm.ErrDuplicatedKey) || Transient(err) {
		p, err = c.createIfAbsent(ctx, spec)
	}
	return p, err
}

func (c *Catalogue) createIfAbsent(ctx context.Context, spec ProductSpec) (Product, error) {
	p, err := c.Refresh(ctx, spec.ID)
	if err == nil {
		return p, ErrExists
	}
	if !errors.Is(err, ErrNotFound) {
		return Product{}, err
	}
	if _, found, err := c.stock.Ledgers().ReadMarker(ctx, spec.ID); err != nil || found {
		return Product{}, cmp.Or(err, fmt.Errorf("%w: product %d is laid out in Redis but not in this database", ErrExists, spec.ID))
	}
	return c.reset(ctx, spec, true)
}

func (c *Catalogue) validate(spec ProductSpec) (Product, error) {
	invalid := func(format string, a ...any) (Product, error) {
		return Product{}, fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	p := Product{ID: spec.ID, Name: spec.Name, Initial: spec.Stock, Shards: cmp.Or(spec.Shards, api.DefaultShards),
		Lock: cmp.Or(spec.Lock, api.DefaultLock), Mode: cmp.Or(spec.Mode, api.DefaultMode),
		Fallback: spec.Fallback == nil || *spec.Fallback, Lab: spec.Lab,
		PayTimeout: spec.PayTimeout, Lifecycle: cmp.Or(spec.Lifecycle, Conditional), Replicated: spec.Replicated,
		Path: spec.Path, Captcha: spec.Captcha, Reservation: spec.Reservation}
	if p.Name == "" {
		p.Name = "product " + strconv.FormatInt(p.ID, 10)
	}
	switch {
	case p.ID <= 0:
		return invalid("id must be a positive integer")
	case p.Initial < 0 || p.Initial > MaxStock:
		return invalid("stock must be between 0 and %d", MaxStock)
	case p.Shards < 1 || p.Shards > stock.MaxShards:
		return invalid("shards must be between 1 and %d", stock.MaxShards)
	case len(p.Name) > 200:
		return invalid("name must be at most 200 bytes")
	case !utf8.ValidString(p.Name) || strings.ContainsFunc(p.Name, unicode.IsControl):
		return invalid("name must be UTF-8 text without control characters")
	case p.PayTimeout != 0 && (p.PayTimeout < MinPayTimeout || p.PayTimeout > MaxPayTimeout):
		return invalid("the payment window must be 0 (none) or between %s and %s", MinPayTimeout, MaxPayTimeout)
	case p.Lifecycle == Naive && !p.Lab:
		return invalid("the naive lifecycle loses races on purpose: it is for lab products")
	case p.Lifecycle != Conditional && p.Lifecycle != Naive:
		return invalid("lifecycle must be %s or %s", Conditional, Naive)
	case p.Captcha && !p.Path:
		return invalid("a captcha guards the purchase path: it needs path as well")
	}
	starts, ends, err := window(spec.StartsAt, spec.EndsAt)
	if err != nil {
		return Product{}, err
	}
	p.StartsAt, p.EndsAt = starts, ends
	switch {
	case p.Reservation && p.StartsAt == nil:
		return invalid("reservations close when the sale starts: a product with reservation needs starts_at")
	case p.Reservation && p.Lab:
		return invalid("a lab product's buyers are anyone's to make up: reservations are for a product sold to signed-in buyers")
	}
	if b := spec.AccountsBefore; b != nil {
		t := b.UTC().Truncate(time.Millisecond)
		p.AccountsBefore = &t
	}
	mode, err := c.opt.Mode(p.Mode)
	if err != nil {
		return Product{}, err
	}
	if _, err := c.Locker(p.Lock); err != nil {
		return Product{}, err
	}
	p.Store = string(mode.Store)
	return p, nil
}

// Bounds of a sale window's times: what every database keeps (MySQL's
// DATETIME ends with year 9999) and JavaScript's Date shows.
var (
	minWindow = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	maxWindow = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// window checks a sale window and returns it as stored: UTC, to the
// millisecond, so that what the database gives back is what was given.
func window(starts, ends *time.Time) (*time.Time, *time.Time, error) {
	var out [2]*time.Time
	for i, t := range []*time.Time{starts, ends} {
		if t == nil {
			continue
		}
		u := t.UTC().Truncate(time.Millisecond)
		if u.Before(minWindow) || u.After(maxWindow) {
			return nil, nil, fmt.Errorf("%w: %s must be between %s and %s", ErrInvalid, [2]string{"starts_at", "ends_at"}[i],
				minWindow.Format(time.RFC3339), maxWindow.Format(time.RFC3339))
		}
		out[i] = &u
	}
	if out[0] != nil && out[1] != nil && !out[1].After(*out[0]) {
		return nil, nil, fmt.Errorf("%w: ends_at (%s) must be after starts_at (%s)", ErrInvalid,
			out[1].Format(time.RFC3339Nano), out[0].Format(time.RFC3339Nano))
	}
	return out[0], out[1], nil
}

// Transient reports a server error that refused a statement for a reason of
// the moment, not of the row: tried again, it may pass. A consumer that took
// one for the row's refusal would dead-letter a good order.
func Transient(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return transientCodes[me.Number]
	}
	// SQLite with two processes on one file: the other one writes.
	return err != nil && (strings.Contains(err.Error(), "SQLITE_BUSY") || strings.Contains(err.Error(), "database is locked"))
}

var transientCodes = map[uint16]bool{
	1040: true, // too many connections
	1053: true, // server shutdown in progress
	1205: true, // lock wait timeout
	1213: true, // deadlock
	1317: true, // query interrupted
	1927: true, // connection killed
	3024: true, // max_execution_time exceeded
}
