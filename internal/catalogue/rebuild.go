package catalogue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"seckill/internal/stock"
)

// rebuildLease bounds a rebuild: the lease that keeps other processes from
// rebuilding the same product at once, and the rebuild's own deadline.
const rebuildLease = 30 * time.Second

// RebuildKey is the key of product id's rebuild lease.
func RebuildKey(id int64) string { return fmt.Sprintf("seckill:rebuild:%d", id) }

// RebuildLater lays a product's stock out again after Redis lost it: the
// stock of each shard is its share of the initial stock less the live
// orders taken from it, and the ledger and the buyers are re-derived from
// those orders, so nobody buys twice. It runs in the background, once per
// process and, under a lease, once across processes; purchases meanwhile
// are refused as rebuilding, never "sold out".
func (c *Catalogue) RebuildLater(p Product) {
	if _, running := c.rebuilding.LoadOrStore(p.ID, struct{}{}); running {
		return
	}
	done, err := c.opt.Enter()
	if err != nil {
		c.rebuilding.Delete(p.ID)
		return
	}
	go func() {
		defer done()
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
// under the product row's lock that every order INSERT shares (see package
// order's insertSQL): an order taken from the lost layout either committed
// before and is counted, or is refused after and its purchase takes again
// from the new layout. The new keys are written before that transaction
// commits, so no purchase finds the new epoch without its stock.
func (c *Catalogue) Rebuild(ctx context.Context, id, epoch int64) (bool, error) {
	release, err := c.opt.Lease(ctx, RebuildKey(id), rebuildLease)
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
		entries, err := c.opt.Sold(tx, p)
		if err != nil {
			return err
		}
		levels := stock.Split(p.Initial, p.Shards)
		for _, e := range entries {
			if e.Shard >= 0 && e.Shard < len(levels) {
				levels[e.Shard] = max(0, levels[e.Shard]-1)
			}
		}
		if err := c.stock.LayOut(ctx, p.Stock(), levels, p.Initial); err != nil {
			return err
		}
		return c.stock.Ledgers().Record(ctx, p.Stock().Layout, entries)
	})
	if errors.Is(err, errAlreadyRebuilt) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("rebuilding product %d: %w", id, err)
	}
	c.keep(p)
	c.stock.Flags().Clear(id)
	c.announce(ctx, resetChannel, id)
	return true, nil
}

var errAlreadyRebuilt = errors.New("catalogue: rebuilt already")
