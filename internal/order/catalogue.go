package order

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"seckill/internal/api"
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

func (c *Catalogue) subscribe() error {
	ctx := context.Background()
	c.sub = c.rdb.Subscribe(ctx, resetChannel, returnChannel)
	for range 2 { // the confirmations: no notice is missed after these
		if _, err := c.sub.Receive(ctx); err != nil {
			c.sub.Close()
			return fmt.Errorf("subscribing to %s and %s: %w", resetChannel, returnChannel, err)
		}
	}
	go c.followNotices()
	return nil
}

// followNotices runs until Close closes the subscription. After a
// reconnection the subscription is confirmed again; notices sent while it
// was down are lost, so then every cached product and flag is dropped.
func (c *Catalogue) followNotices() {
	defer close(c.done)
	for m := range c.sub.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Subscription:
			c.products.Clear()
			c.stock.ClearAllSoldOut()
		case *redis.Message:
			id, err := strconv.ParseInt(m.Payload, 10, 64)
			if err != nil {
				c.log.Warn("ignoring a malformed notice", "channel", m.Channel, "payload", m.Payload)
				continue
			}
			if m.Channel == resetChannel {
				c.products.Delete(id)
			}
			c.stock.ClearSoldOut(id)
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

// Product returns a product, from the process's cache when it has it.
func (c *Catalogue) Product(ctx context.Context, id int64) (Product, error) {
	if p, ok := c.products.Load(id); ok {
		return p.(Product), nil
	}
	return c.refresh(ctx, id)
}

// refresh reads a product from the database and caches it.
func (c *Catalogue) refresh(ctx context.Context, id int64) (Product, error) {
	var p Product
	err := c.db.WithContext(ctx).Take(&p, id).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		c.products.Delete(id)
		return Product{}, fmt.Errorf("%w: product %d", ErrNotFound, id)
	}
	if err != nil {
		return Product{}, fmt.Errorf("reading product %d: %w", id, err)
	}
	c.products.Store(id, p)
	return p, nil
}

// ProductSpec describes a product to create or reset.
type ProductSpec struct {
	ID       int64
	Name     string
	Stock    int
	Shards   int    // default api.DefaultShards
	Lock     string // default api.DefaultLock
	Mode     string // default api.DefaultMode
	Fallback *bool  // default true
	Lab      bool   // fixed when the product is created
	// PayTimeout is the payment window: MinPayTimeout–MaxPayTimeout, or 0
	// for none (the default).
	PayTimeout time.Duration
	// Lifecycle is Conditional (the default) or, on a lab product, Naive.
	Lifecycle string
	// Replicated answers a purchase once its take is on a replica too.
	Replicated bool
	// Reset is the operator's explicit reset: only it may change the lock
	// or the mode of an existing product that is not a lab product.
	Reset bool
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
	// A layout recorded in Redis by a process whose database did not know
	// the product: the new epoch must not reuse its keys.
	marker, _, err := c.stock.Ledgers().ReadMarker(ctx, p.ID)
	if err != nil {
		return Product{}, err
	}
	levels := stock.Split(p.Initial, p.Shards)
	var old *Product
	err = c.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		// Shard rows first, then the product: the db mode's purchases lock
		// in that order too, so the two cannot deadlock.
		if err := stock.LayOutSQL(tx, p.stock(), levels); err != nil {
			return err
		}
		var cur Product
		err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Take(&cur, p.ID).Error
		switch {
		case errors.Is(err, gorm.ErrRecordNotFound):
			p.Sale, p.Epoch = 1, marker.Epoch+1
		case err != nil:
			return fmt.Errorf("reading product %d: %w", p.ID, err)
		case createOnly:
			return fmt.Errorf("%w: product %d was created meanwhile", ErrExists, p.ID)
		case cur.Lab != p.Lab:
			return fmt.Errorf("%w: product %d was created with lab %v; that is fixed (use another id)", ErrInvalid, p.ID, cur.Lab)
		case !cur.Lab && !spec.Reset && (cur.Lock != p.Lock || cur.Mode != p.Mode):
			// A POST that looks like a create must not change how a
			// real sale is sold (issue 25: lock none, then oversold).
			return fmt.Errorf("%w: product %d is sold under lock %s and mode %s; send them again, or \"reset\": true to change them",
				ErrResetRequired, p.ID, cur.Lock, cur.Mode)
		default:
			old = &cur
			p.Sale, p.Epoch = cur.Sale+1, max(cur.Epoch, marker.Epoch)+1
		}
		// Laid out before the commit publishes the new epoch: no purchase
		// can find the epoch without its keys.
		if err := c.stock.LayOut(ctx, p.stock(), levels, p.Initial); err != nil {
			return err
		}
		return tx.Save(&p).Error
	})
	if err != nil {
		return Product{}, fmt.Errorf("resetting product %d: %w", p.ID, err)
	}
	c.products.Store(p.ID, p)
	c.stock.ClearSoldOut(p.ID)
	c.announce(ctx, resetChannel, p.ID)
	if old != nil && old.Store == string(stock.InRedis) {
		if err := c.stock.Drop(ctx, old.stock().Layout); err != nil {
			c.log.Warn("the keys of a past layout stay in Redis", "product", p.ID, "epoch", old.Epoch, "error", err)
		}
	}
	return p, nil
}

// ErrResetRequired: a POST of an existing product that is not a lab product
// changed its lock or mode without the operator's explicit reset.
var ErrResetRequired = errors.New("order: changing how a product is sold needs an explicit reset")

// ErrExists: CreateIfAbsent found the product in the database or in Redis.
var ErrExists = errors.New("order: product exists")

// CreateIfAbsent creates a product unless it exists, in the database or in
// Redis: a process started on a fresh database beside a Redis that another
// process sells the product from must not lay its stock out again.
//
// Processes started at once may create it at once: their transactions
// deadlock or one's insert finds the other's row, and the one refused
// reads again, once, and finds it.
func (c *Catalogue) CreateIfAbsent(ctx context.Context, spec ProductSpec) (Product, error) {
	p, err := c.createIfAbsent(ctx, spec)
	if errors.Is(err, gorm.ErrDuplicatedKey) || transient(err) {
		p, err = c.createIfAbsent(ctx, spec)
	}
	return p, err
}

func (c *Catalogue) createIfAbsent(ctx context.Context, spec ProductSpec) (Product, error) {
	p, err := c.refresh(ctx, spec.ID)
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
	p := Product{ID: spec.ID, Name: spec.Name, Initial: spec.Stock, Shards: spec.Shards,
		Lock: spec.Lock, Mode: spec.Mode, Fallback: spec.Fallback == nil || *spec.Fallback, Lab: spec.Lab,
		PayTimeout: spec.PayTimeout, Lifecycle: cmp.Or(spec.Lifecycle, Conditional), Replicated: spec.Replicated}
	if p.ID <= 0 {
		return invalid("id must be a positive integer")
	}
	if p.Initial < 0 || p.Initial > MaxStock {
		return invalid("stock must be between 0 and %d", MaxStock)
	}
	if p.Shards == 0 {
		p.Shards = api.DefaultShards
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
	if !utf8.ValidString(p.Name) || strings.ContainsFunc(p.Name, unicode.IsControl) {
		return invalid("name must be UTF-8 text without control characters")
	}
	if p.PayTimeout != 0 && (p.PayTimeout < MinPayTimeout || p.PayTimeout > MaxPayTimeout) {
		return invalid("the payment window must be 0 (none) or between %s and %s", MinPayTimeout, MaxPayTimeout)
	}
	switch p.Lifecycle {
	case Conditional:
	case Naive:
		if !p.Lab {
			return invalid("the naive lifecycle loses races on purpose: it is for lab products")
		}
	default:
		return invalid("lifecycle must be %s or %s", Conditional, Naive)
	}
	p.Lock = cmp.Or(p.Lock, api.DefaultLock)
	p.Mode = cmp.Or(p.Mode, api.DefaultMode)
	mode, err := ModeNamed(p.Mode)
	if err != nil {
		return Product{}, err
	}
	if _, err := c.locker(p.Lock); err != nil {
		return Product{}, err
	}
	p.Store = string(mode.Store())
	return p, nil
}
