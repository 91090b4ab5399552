package order

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"seckill/internal/catalogue"
	"seckill/internal/idgen"
)

// Reads reads orders: for a buyer, who sees a lab product's orders and
// their own (Buyer.May), and, unguarded, for the operator and the tests.
// An order is its row, or its entry in the async mode's queue while the
// row is not written yet.
type Reads struct {
	db    *gorm.DB
	cat   *catalogue.Catalogue
	queue *Queue
}

// OrderFor returns order id as Order does, if b may read it: a lab
// product's order to anyone, any other only to its buyer, signed in. To
// another signed-in buyer it is ErrNotFound, as an order that does not
// exist, after the same lookups (see orderOf); to a buyer not signed in it
// is refused (see Buyer.May) whether it exists or not, so that neither
// learns whether it does.
func (r *Reads) OrderFor(ctx context.Context, id idgen.ID, b Buyer) (Order, error) {
	o, _, err := r.orderOf(ctx, id, b)
	return o, err
}

// orderOf reads order id and its product, if b may see it: a lab
// product's order, or b's own, b signed in. Whatever b may not see (no
// row, a void row, another buyer's order) goes one way: it is looked for
// among the queued orders as a miss is, so that "not yours" and "does not
// exist" cost the same lookups (two SQL reads, one Redis pipeline between
// them) and get one answer: ErrNotFound, or b's refusal (Buyer.May) when b
// is not signed in. The product costs no round trip once the catalogue
// caches it. An order refused by the database after it was queued keeps no
// product in the pending index: it counts as a product's that is not a
// lab product.
func (r *Reads) orderOf(ctx context.Context, id idgen.ID, b Buyer) (Order, catalogue.Product, error) {
	row, found, err := find(ctx, r.db, id)
	if err != nil {
		return Order{}, catalogue.Product{}, err
	}
	if found && row.Status != Void {
		if p, ok, err := r.sees(ctx, b, row); ok || err != nil {
			return row, p, err
		}
	}
	q, queued, err := r.queue.queued(ctx, id)
	if err != nil {
		return Order{}, catalogue.Product{}, err
	}
	if queued && !found { // a row, void or not, is the order: its queued entry is stale
		if p, ok, err := r.sees(ctx, b, q); ok || err != nil {
			return q, p, err
		}
	}
	if !queued {
		// The order may have left the queue for its row between the two
		// reads: a consumer writes the row before it drops the queued
		// entry, so the row is there now. Read again, whatever was found
		// the first time, so that every miss costs the same lookups.
		if row, found, err = find(ctx, r.db, id); err != nil {
			return Order{}, catalogue.Product{}, err
		}
		if found && row.Status != Void {
			if p, ok, err := r.sees(ctx, b, row); ok || err != nil {
				return row, p, err
			}
		}
	}
	var none catalogue.Product
	if refused := b.May(none); refused != nil {
		return Order{}, none, refused
	}
	return Order{}, none, fmt.Errorf("%w: order %s", ErrNotFound, id)
}

// sees reports whether b may see o, with o's product: a lab product's
// order anyone, any other its own buyer, signed in. An order of a product
// the catalogue does not have is seen by no one.
func (r *Reads) sees(ctx context.Context, b Buyer, o Order) (catalogue.Product, bool, error) {
	var p catalogue.Product
	if o.ProductID != 0 {
		var err error
		switch p, err = r.cat.Product(ctx, o.ProductID); {
		case errors.Is(err, ErrNotFound):
			return p, false, nil
		case err != nil:
			return p, false, err
		}
	}
	return p, p.Lab || (b.Signed && o.UserID == b.ID), nil
}

// Order returns an order by id: written, or queued (status Pending), or
// refused by the database after it was queued (status Failed, with the
// Reason). A void row is not an order: not found.
func (r *Reads) Order(ctx context.Context, id idgen.ID) (Order, error) {
	o, found, err := find(ctx, r.db, id)
	switch {
	case err != nil:
		return Order{}, err
	case found && o.Status == Void:
		return Order{}, fmt.Errorf("%w: order %s was never completed; its unit went back on sale", ErrNotFound, id)
	case found:
		return o, nil
	}
	q, queued, err := r.queue.queued(ctx, id)
	switch {
	case err != nil:
		return Order{}, err
	case !queued:
		return Order{}, fmt.Errorf("%w: order %s", ErrNotFound, id)
	}
	return q, nil
}

// MaxLookup bounds the ids of one Written call.
const MaxLookup = 1000

// Written returns those of ids that are rows of product's orders (void rows
// aside): how a client that was told 202 checks that its orders reached the
// table. On a product that is not a lab product, only b's orders, and b
// must have signed in (Buyer.May).
func (r *Reads) Written(ctx context.Context, product int64, b Buyer, ids []idgen.ID) ([]idgen.ID, error) {
	if len(ids) > MaxLookup {
		return nil, fmt.Errorf("%w: at most %d ids at once, not %d", ErrInvalid, MaxLookup, len(ids))
	}
	q := r.db.WithContext(ctx).Model(&Order{})
	p, err := r.cat.Product(ctx, product)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	if !p.Lab {
		if err := b.May(p); err != nil {
			return nil, err
		}
		q = q.Where("user_id = ?", b.ID)
	}
	raw := make([]int64, len(ids))
	for i, id := range ids {
		raw[i] = int64(id)
	}
	var found []idgen.ID
	if len(raw) == 0 {
		return found, nil
	}
	err = q.Where("id IN ? AND product_id = ? AND status <> ?", raw, product, Void).Pluck("id", &found).Error
	if err != nil {
		return nil, fmt.Errorf("looking up %d orders: %w", len(ids), err)
	}
	return found, nil
}
