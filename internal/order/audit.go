package order

import (
	"context"
	"errors"
	"fmt"

	"seckill/internal/api"

	"seckill/internal/stock"
)

// NewAudit computes an audit's derived fields from its counts.
func NewAudit(product int64, initial, remaining, taken, orders int) api.Audit {
	a := api.Audit{ProductID: product, Initial: initial, Remaining: remaining, Taken: taken, Orders: orders}
	a.Oversold = max(0, orders-initial)
	a.LostUpdates = orders - (initial - remaining)
	a.Unsettled = max(0, taken-orders)
	switch {
	case a.Oversold > 0:
		a.Verdict = api.VerdictOversold
	case a.LostUpdates > 0:
		a.Verdict = api.VerdictInconsistent
	case a.LostUpdates < 0 || a.Unsettled > 0:
		a.Verdict = api.VerdictLost
	default:
		a.Verdict = api.VerdictOK
	}
	return a
}

// View is a product with its stock and sales.
type View struct {
	Product
	Levels  []int // stock per shard, in shard order
	Sold    int   // live orders of the current sale
	SoldOut bool  // this process's sold-out flag
}

// Remaining is the stock left over all shards.
func (v View) Remaining() int {
	n := 0
	for _, l := range v.Levels {
		n += l
	}
	return n
}

// Audit returns the product's view and its audit. The counts are read one
// after the other, so while purchases are in flight the audit may see a
// unit taken whose order is not written yet; it is exact on a quiet product.
// A product whose stock Redis lost is being rebuilt: ErrRebuilding.
func (s *Service) Audit(ctx context.Context, id int64) (View, api.Audit, error) {
	p, err := s.Product(ctx, id)
	if err != nil {
		return View{}, api.Audit{}, err
	}
	v := View{Product: p, SoldOut: s.stock.SoldOut(id)}
	v.Levels, err = s.stock.Levels(ctx, p.stock())
	if errors.Is(err, stock.ErrNotLaidOut) {
		// Stale (reset elsewhere) or lost: read the product again to tell.
		if fresh, ferr := s.refresh(ctx, id); ferr == nil && fresh.Epoch != p.Epoch {
			return s.Audit(ctx, id)
		}
		s.rebuild(p)
		return View{}, api.Audit{}, fmt.Errorf("%w: product %d", ErrRebuilding, id)
	}
	if err != nil {
		return View{}, api.Audit{}, err
	}
	var sold int64
	err = s.db.WithContext(ctx).Model(&Order{}).
		Where("product_id = ? AND sale = ? AND buyer IS NOT NULL", id, p.Sale).Count(&sold).Error
	if err != nil {
		return View{}, api.Audit{}, fmt.Errorf("counting orders of product %d: %w", id, err)
	}
	v.Sold = int(sold)
	taken := p.Initial - v.Remaining()
	if p.Store == string(stock.InRedis) {
		if taken, err = s.stock.Takes(ctx, p.stock().Layout); err != nil {
			return View{}, api.Audit{}, err
		}
	}
	a := NewAudit(id, p.Initial, v.Remaining(), taken, v.Sold)
	a.Sale = p.Sale
	if a.Reconciled, err = s.LastReconciliation(ctx, id); err != nil {
		return View{}, api.Audit{}, err
	}
	return v, a, nil
}
