package order

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"seckill/internal/stock"
)

// rebuildLease bounds a rebuild: the lease that keeps other processes from
// rebuilding the same product at once, and the rebuild's own deadline.
const rebuildLease = 30 * time.Second

func rebuildKey(id int64) string { return fmt.Sprintf("seckill:rebuild:%d", id) }

// rebuild lays a product's stock out again after Redis lost it: the stock of
// each shard is its share of the initial stock less the live orders taken
// from it, and the ledger and the buyers are re-derived from those orders,
// so nobody buys twice. It runs in the background, once per process and,
// under a lease in Redis, once across processes; purchases meanwhile get
// ErrRebuilding, never "sold out".
func (c *Catalogue) rebuild(p Product) {
	if _, running := c.rebuilding.LoadOrStore(p.ID, struct{}{}); running {
		return
	}
	if err := c.enter(); err != nil {
		c.rebuilding.Delete(p.ID)
		return
	}
	go func() {
		defer c.working.Done()
		defer c.rebuilding.Delete(p.ID)
		ctx, cancel := context.WithTimeout(context.Background(), rebuildLease)
		defer cancel()
		done, err := c.Rebuild(ctx, p.ID, p.Epoch)
		switch {
		case err != nil:
			c.log.Error("rebuilding the stock of a product", "product", p.ID, "error", err)
		case done:
			c.log.Warn("rebuilt the stock of a product from its orders after Redis lost it", "product", p.ID)
		}
	}()
}

// Rebuild lays out product id's stock anew from its orders, if its layout
// is still epoch. It reports whether it did; false with no error means
// another process holds the rebuild lease or did the rebuild already.
//
// The layout's epoch changes in the same transaction that reads the orders,
// under the product row's lock that every order INSERT shares (see
// insertSQL): an order taken from the lost layout either committed before
// and is counted, or is refused after and its purchase takes again from the
// new layout. The new keys are written before that transaction commits, so
// no purchase finds the new epoch without its stock.
func (c *Catalogue) Rebuild(ctx context.Context, id, epoch int64) (bool, error) {
	release, err := c.rec.lease(ctx, rebuildKey(id), rebuildLease)
	if err != nil || release == nil {
		return false, err
	}
	defer release()

	var p Product
	err = c.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&Product{}).Where("id = ? AND epoch = ?", id, epoch).
			Updates(map[string]any{"epoch": gorm.Expr("epoch + 1"), "rebuilt_at": time.Now()})
		if res.Error != nil || res.RowsAffected == 0 {
			return cmp.Or(res.Error, errAlreadyRebuilt)
		}
		if err := tx.Take(&p, id).Error; err != nil {
			return err
		}
		var orders []Order
		if err := tx.Where("product_id = ? AND sale = ? AND status IN ?", id, p.Sale, live).Find(&orders).Error; err != nil {
			return err
		}
		levels := stock.Split(p.Initial, p.Shards)
		entries := make([]stock.Entry, 0, len(orders))
		for _, o := range orders {
			if o.Shard >= 0 && o.Shard < len(levels) {
				levels[o.Shard] = max(0, levels[o.Shard]-1)
			}
			entries = append(entries, stock.Entry{User: o.UserID, Order: o.ID, Key: o.Key, Shard: o.Shard, At: o.CreatedAt})
		}
		if err := c.stock.LayOut(ctx, p.stock(), levels, p.Initial); err != nil {
			return err
		}
		return c.stock.Ledgers().Record(ctx, p.stock().Layout, entries)
	})
	if errors.Is(err, errAlreadyRebuilt) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("rebuilding product %d: %w", id, err)
	}
	c.products.Store(id, p)
	c.stock.ClearSoldOut(id)
	c.announce(ctx, resetChannel, id)
	return true, nil
}

var errAlreadyRebuilt = errors.New("order: rebuilt already")

// RedisConnected is the Redis client's OnConnect hook (app wires it, on
// one Redis and on a cluster's every node): a server not met before makes
// the products wait for their repair (see repairGate). A new connection may
// also be to a server that restarted with other persistence settings: the
// durability is read again on its next use. When the service made its own
// order id generator (Options.IDs unset), the generator's Connected runs
// here too: it drops the id blocks of a server that restarted before the
// connection serves anything (see idgen.Redis).
func (s *Service) RedisConnected(ctx context.Context, cn *redis.Conn) error {
	s.durable.Stale()
	if err := s.rec.serverSeen(ctx, cn); err != nil {
		return err
	}
	if !s.ownIDs {
		return nil
	}
	return s.ids.Connected(ctx, cn)
}
