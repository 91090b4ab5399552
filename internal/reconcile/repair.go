package reconcile

import (
	"context"
	"fmt"

	"seckill/internal/catalogue"
	"seckill/internal/idgen"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/stock"
)

// The other direction of the reconciler: orders whose take the store
// forgot. A Redis back from an AOF or RDB that lost its last writes, or a
// replica promoted without its master's last takes, holds the units of
// those takes in its stock again, and neither the ledger nor the buyer's
// key names them: they would be sold twice. Each such order's take is
// recorded again and its unit taken out of the stock, once, in one atomic
// step with the record (stock.Restore).

// restoreForgotten restores the takes of p's live orders that ledger (read
// before) does not name. It reads the live orders of the sale; each
// restore checks the shard's ledger again, so an order whose take landed
// after ledger was read is left as it is.
func (rec *Reconciler) restoreForgotten(ctx context.Context, p catalogue.Product, ledger []stock.Entry, locker lock.Locker) (Reconciliation, error) {
	recorded := make(map[idgen.ID]bool, len(ledger))
	for _, e := range ledger {
		recorded[e.Order] = true
	}
	var r Reconciliation
	var rows []order.Order
	err := rec.db.WithContext(ctx).Select("id", "user_id", "shard", "idem_key", "created_at").
		Where("product_id = ? AND sale = ? AND status IN ?", p.ID, p.Sale, order.LiveStatuses()).Find(&rows).Error
	if err != nil {
		return r, fmt.Errorf("reading the live orders of product %d: %w", p.ID, err)
	}
	req := stock.Request{Product: p.Stock(), Taker: order.ModeOf(p).Taker(stock.Locked{Locker: locker,
		Lock: lock.Options{TTL: rec.opt.LockTTL}, GiveBackWait: rec.orders.Budget().GiveBackWait()})}
	var restored []stock.Entry
	for _, o := range rows {
		if recorded[o.ID] {
			continue
		}
		if o.Shard < 0 || o.Shard >= p.Shards {
			r.Orphans++
			continue
		}
		e := stock.Entry{User: o.UserID, Order: o.ID, Key: o.Key, Shard: o.Shard, At: o.CreatedAt}
		what, err := rec.stock.Restore(ctx, req, e)
		if err != nil {
			return r, err
		}
		switch what {
		case stock.Restored:
			r.Restored++
			restored = append(restored, e)
			rec.log.Warn("took back the unit of an order whose take the store forgot", "product", p.ID, "shard", e.Shard, "order", e.Order, "user", e.User)
		case stock.Short:
			r.Short++
			restored = append(restored, e)
			rec.log.Error("an order's take the store forgot was sold again: no unit left to take back", "product", p.ID, "shard", e.Shard, "order", e.Order, "user", e.User)
		case stock.Conflict:
			r.Orphans++
		}
	}
	// On a cluster the buyer's key is in a slot of its own.
	if err := rec.stock.SettleBuyers(ctx, p.Stock().Layout, restored); err != nil {
		return r, err
	}
	return r, nil
}
