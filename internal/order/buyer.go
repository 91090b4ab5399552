package order

import (
	"errors"
	"fmt"
	"time"

	"seckill/internal/catalogue"
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
