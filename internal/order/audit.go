package order

import (
	"context"
	"fmt"
)

// Verdicts of an audit.
const (
	VerdictOK           = "OK"
	VerdictOversold     = "OVERSOLD"
	VerdictInconsistent = "INCONSISTENT"
)

// Audit compares the orders in the database with the stock left in the
// store. Its JSON names are part of the API: the harness, the page and
// users' scripts read them.
type Audit struct {
	ProductID int64 `json:"product_id"`
	Initial   int   `json:"initial"`
	Remaining int   `json:"remaining"`
	Orders    int   `json:"orders"`
	// Oversold is the orders beyond the initial stock.
	Oversold int `json:"oversold"`
	// LostUpdates is orders − (initial − remaining): units sold that the
	// store never counted as taken (positive), or taken and never sold
	// (negative).
	LostUpdates int    `json:"lost_updates"`
	Verdict     string `json:"verdict"`
}

// NewAudit computes the derived fields from the three counts.
func NewAudit(product int64, initial, remaining, orders int) Audit {
	a := Audit{ProductID: product, Initial: initial, Remaining: remaining, Orders: orders}
	a.Oversold = max(0, orders-initial)
	a.LostUpdates = orders - (initial - remaining)
	switch {
	case a.Oversold > 0:
		a.Verdict = VerdictOversold
	case a.LostUpdates != 0:
		a.Verdict = VerdictInconsistent
	default:
		a.Verdict = VerdictOK
	}
	return a
}

// View is a product with its stock and sales.
type View struct {
	Product
	Levels  []int // stock per shard, in shard order
	Sold    int   // orders in the database
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

// Audit returns the product's view and its audit. The two counts are read
// one after the other, so while purchases are in flight the audit may see a
// unit taken whose order is not written yet; it is exact on a quiet product.
func (s *Service) Audit(ctx context.Context, id int64) (View, Audit, error) {
	p, err := s.Product(ctx, id)
	if err != nil {
		return View{}, Audit{}, err
	}
	v := View{Product: p, SoldOut: s.stock.SoldOut(id)}
	if v.Levels, err = s.stock.Levels(ctx, p.stock()); err != nil {
		return View{}, Audit{}, err
	}
	var sold int64
	if err := s.db.WithContext(ctx).Model(&Order{}).Where("product_id = ?", id).Count(&sold).Error; err != nil {
		return View{}, Audit{}, fmt.Errorf("counting orders of product %d: %w", id, err)
	}
	v.Sold = int(sold)
	return v, NewAudit(id, p.Initial, v.Remaining(), v.Sold), nil
}
