package order

import (
	"context"
	"errors"
	"fmt"
	"time"

	"seckill/internal/catalogue"
	"seckill/internal/idgen"
)

var (
	// ErrSignIn: a product that is not a lab product is sold, and its
	// orders are shown, only to buyers who signed in.
	ErrSignIn = errors.New("order: sign in first")
	// ErrAccountTooNew: the product sells only to accounts made before a
	// time (catalogue.Product.AccountsBefore), and the buyer's is newer.
	ErrAccountTooNew = errors.New("order: account too new for this sale")
)

// Buyer is who asks to buy, pay, cancel or read, as the edge found out.
// The rule of who may touch what lives here, beside the orders, so that
// every way in (HTTP today) applies the same one.
type Buyer struct {
	// ID is the buyer's user id; 0 when the request named none.
	ID int64
	// Signed: ID comes from a verified session (a signed token), not
	// from what the request claims.
	Signed bool
	// Created is when a signed-in buyer's account was made.
	Created time.Time
}

// May reports whether b may buy p, or touch p's orders at all: on a lab
// product anyone may be anyone (the harness is thousands of buyers); on
// any other, only a buyer who signed in. A buyer who named a user id
// (ID set, not Signed) gets ErrInvalid, one who named none ErrSignIn.
func (b Buyer) May(p catalogue.Product) error {
	switch {
	case p.Lab || b.Signed:
		return nil
	case b.ID != 0:
		return fmt.Errorf("%w: a user_id in the body names a buyer on lab products only; sign in (POST /api/sessions) and send Authorization: Bearer <token> instead", ErrInvalid)
	}
	return fmt.Errorf("%w: orders of products that are not lab products are the signed-in buyer's: sign in (POST /api/sessions) and send Authorization: Bearer <token>", ErrSignIn)
}

// MayBuy is May for a purchase: a product with AccountsBefore sells only
// to signed-in buyers whose account is older; their orders stay theirs to
// read and pay whatever it says later (May).
func (b Buyer) MayBuy(p catalogue.Product) error {
	if err := b.May(p); err != nil {
		return err
	}
	if !p.Lab && p.AccountsBefore != nil && !b.Created.Before(*p.AccountsBefore) {
		return fmt.Errorf("%w: this sale is for accounts made before %s", ErrAccountTooNew, p.AccountsBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

// OrderFor returns order id as Order does, if b may read it: a lab
// product's order to anyone, any other only to its buyer, signed in. To
// another signed-in buyer it is ErrNotFound, as an order that does not
// exist, after the same lookups (see orderOf); to a buyer not signed in it
// is refused (see Buyer.May) whether it exists or not, so that neither
// learns whether it does.
func (s *Service) OrderFor(ctx context.Context, id idgen.ID, b Buyer) (Order, error) {
	o, _, err := s.orderOf(ctx, id, b)
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
func (s *Service) orderOf(ctx context.Context, id idgen.ID, b Buyer) (Order, catalogue.Product, error) {
	row, found, err := find(ctx, s.db, id)
	if err != nil {
		return Order{}, catalogue.Product{}, err
	}
	if found && row.Status != Void {
		if p, ok, err := s.sees(ctx, b, row); ok || err != nil {
			return row, p, err
		}
	}
	q, queued, err := s.queue.queued(ctx, id)
	if err != nil {
		return Order{}, catalogue.Product{}, err
	}
	if queued && !found { // a row, void or not, is the order: its queued entry is stale
		if p, ok, err := s.sees(ctx, b, q); ok || err != nil {
			return q, p, err
		}
	}
	if !queued {
		// The order may have left the queue for its row between the two
		// reads: a consumer writes the row before it drops the queued
		// entry, so the row is there now. Read again, whatever was found
		// the first time, so that every miss costs the same lookups.
		if row, found, err = find(ctx, s.db, id); err != nil {
			return Order{}, catalogue.Product{}, err
		}
		if found && row.Status != Void {
			if p, ok, err := s.sees(ctx, b, row); ok || err != nil {
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
func (s *Service) sees(ctx context.Context, b Buyer, o Order) (catalogue.Product, bool, error) {
	var p catalogue.Product
	if o.ProductID != 0 {
		var err error
		switch p, err = s.cat.Product(ctx, o.ProductID); {
		case errors.Is(err, ErrNotFound):
			return p, false, nil
		case err != nil:
			return p, false, err
		}
	}
	return p, p.Lab || (b.Signed && o.UserID == b.ID), nil
}
