package order

import (
	"context"
	"errors"
	"fmt"
	"time"

	"seckill/internal/admission"
	"seckill/internal/catalogue"
	"seckill/internal/stock"
)

// Door is the service's part that decides who comes in before a purchase
// touches the stock, cheapest refusal first: the sale window (no round
// trip), the client's address, the path token, the buyer's rate limit (one
// round trip each), the buyer's reservation (none but the reads of the
// opening, see reservations.check), then the concurrency limit; and it
// issues the path
// tokens. Its refusals come before the purchase draws an id or takes a
// lock, so that a herd of them costs the stock nothing.
type Door struct {
	cat        *catalogue.Catalogue
	buyers     Admitter        // Options.Admit
	paths      Paths           // Options.Paths
	captchas   Captchas        // Options.Captchas
	perAddress AddressAdmitter // Options.PerAddress
	limit      Limiter         // Options.Limit
	now        func() time.Time
	marks      *marks // the service's, held until Redis takes them
	ledgers    *stock.Ledgers
	reserved   *reservations
}

// Door is the service's part that admits purchases and issues path tokens.
func (s *Service) Door() *Door { return s.door }

// admit runs the refusals a purchase meets before it costs a lock or a
// script (the concurrency limit aside: see shed).
func (d *Door) admit(ctx context.Context, p catalogue.Product, in Purchase) error {
	if err := d.window(p); err != nil {
		return err
	}
	if err := d.admitClient(ctx, p, in); err != nil {
		return err
	}
	if err := d.redeemPath(ctx, p, in); err != nil {
		return err
	}
	if err := d.admitBuyer(ctx, in.UserID, p.ID); err != nil {
		return err
	}
	return d.reserved.check(ctx, p, in.UserID)
}

// Refusal is the answer every purchase of product id gets now, whoever
// buys it, when the process knows it without a round trip: the product
// does not exist (read and found missing less than catalogue.MissTTL ago),
// its sale has not started or has ended, or it is sold out for good (the
// process's flag is set and no unit of a purchase whose outcome is unknown
// may come back). Nil when only the purchase itself can tell. The edge asks
// it before it verifies the buyer, so that the herd's answers cost no token
// check and no round trip; the purchase would answer the same (Buy). A
// retry (a purchase with the client's own key) is never refused as sold
// out here: its first attempt may hold a unit, which only the buyer's
// record can tell.
func (d *Door) Refusal(id int64, retry bool) error {
	p, ok, err := d.cat.Cached(id)
	if err != nil || !ok {
		return err
	}
	if err := d.window(p); err != nil {
		return err
	}
	if !retry && d.cat.SoldOut(id) && d.settled(p) {
		return stock.ErrSoldOut
	}
	return nil
}

// settled reports, without a round trip, that no unit of p's purchases
// whose outcome is unknown may come back: true for a product in SQL, whose
// takes and orders are one transaction; for one in Redis, when the process
// holds no mark of its layout and knows that Redis held none a moment ago
// (stock.Ledgers.KnownSettled).
func (d *Door) settled(p catalogue.Product) bool {
	if p.Store != string(stock.InRedis) {
		return true
	}
	l := p.Stock().Layout
	return !d.marks.holds(l) && d.ledgers.KnownSettled(l)
}

// window refuses a purchase outside p's sale window: from the cached
// product alone, before anything that costs a round trip (the rate limit,
// the id, the take), so that the buyers who click before the opening cost
// the service nothing else. Paying and cancelling never ask it.
func (d *Door) window(p catalogue.Product) error {
	now := d.now()
	switch {
	case p.StartsAt != nil && now.Before(*p.StartsAt):
		return &NotStartedError{Product: p.ID, StartsAt: *p.StartsAt, Now: now}
	case p.EndsAt != nil && !now.Before(*p.EndsAt):
		return fmt.Errorf("%w: product %d's sale ended at %s", ErrSaleEnded, p.ID, p.EndsAt.Format(time.RFC3339Nano))
	}
	return nil
}

// admitClient asks Options.PerAddress to let the purchase's client in. Lab
// products are exempt: one harness, from one address, is their thousands
// of buyers.
func (d *Door) admitClient(ctx context.Context, p catalogue.Product, in Purchase) error {
	if d.perAddress == nil || p.Lab || in.Client == "" {
		return nil
	}
	return d.perAddress.Allow(ctx, in.Client)
}

// redeemPath spends the purchase's path token on a product that asks for
// one. Before the rate limit: a bot without a token leaves no key behind.
func (d *Door) redeemPath(ctx context.Context, p catalogue.Product, in Purchase) error {
	if !p.Path {
		return nil
	}
	if d.paths == nil {
		return fmt.Errorf("%w: product %d asks for a purchase path and this service issues none", ErrNoPaths, p.ID)
	}
	return d.paths.Redeem(ctx, in.UserID, p.ID, in.Path, in.Key)
}

// admitBuyer asks Options.Admit to let the buyer's purchase of product in.
func (d *Door) admitBuyer(ctx context.Context, buyer, product int64) error {
	if d.buyers == nil {
		return nil
	}
	return d.buyers.Allow(ctx, buyer, product)
}

// shed asks Options.Limit to admit a purchase of p; done reports the
// purchase's outcome to it. A lab product's purchases are never shed: the
// lab shows what the locks do at any concurrency, and shedding would hide
// the races it is there to show. Nor is a purchase of a product this
// process knows is sold out: its answer (409) costs no Redis and is final,
// and a buyer told "overloaded" would try again for nothing.
func (d *Door) shed(p catalogue.Product) (done func(error), err error) {
	if d.limit == nil || p.Lab || d.cat.SoldOut(p.ID) {
		return func(error) {}, nil
	}
	release, err := d.limit.Acquire()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	return func(err error) { release(time.Since(start), failed(err)) }, nil
}

// IssuePath gives a buyer a one-time token for a purchase of a product that
// asks for one (Product.Path): from the opening second only, like the
// purchase itself, so that a bot cannot stock up on tokens before it, and
// for a solved captcha when the product asks for one.
func (d *Door) IssuePath(ctx context.Context, in PathRequest) (admission.PathToken, error) {
	if in.Buyer <= 0 || in.Product <= 0 {
		return admission.PathToken{}, fmt.Errorf("%w: the buyer and product ids must be positive integers", ErrInvalid)
	}
	p, err := d.cat.Product(ctx, in.Product)
	if err != nil {
		return admission.PathToken{}, err
	}
	if err := d.pathFor(p); err != nil {
		return admission.PathToken{}, err
	}
	if err := d.window(p); err != nil {
		return admission.PathToken{}, err
	}
	if p.Captcha {
		if d.captchas == nil {
			return admission.PathToken{}, fmt.Errorf("%w: product %d asks for a captcha and this service checks none", ErrNoPaths, p.ID)
		}
		if err := d.captchas.Solve(ctx, in.CaptchaID, in.Captcha, pathBinding(p, in.Buyer)); err != nil {
			return admission.PathToken{}, err
		}
	}
	return d.paths.Issue(ctx, in.Buyer, p.ID)
}

// CaptchaBinding is what a captcha for buyer's purchase path of a product
// that asks for one is bound to (admission.PathBinding): the buyer, the
// product and its opening, so that it buys nothing else, and nothing after
// an operator moves the opening. Not before the opening: a captcha made
// then could be solved at leisure, by a farm of people or a model, and spent
// at the opening second, the very head start the captcha is there to deny.
func (d *Door) CaptchaBinding(ctx context.Context, buyer, product int64) (string, error) {
	if buyer <= 0 || product <= 0 {
		return "", fmt.Errorf("%w: the buyer and product ids must be positive integers", ErrInvalid)
	}
	p, err := d.cat.Product(ctx, product)
	if err != nil {
		return "", err
	}
	if err := d.pathFor(p); err != nil {
		return "", err
	}
	switch {
	case !p.Captcha:
		return "", fmt.Errorf("%w: product %d asks for no captcha: ask POST /api/products/%d/path directly", ErrInvalid, p.ID, p.ID)
	case d.captchas == nil:
		return "", fmt.Errorf("%w: product %d asks for a captcha and this service checks none", ErrNoPaths, p.ID)
	}
	if err := d.window(p); err != nil {
		return "", err
	}
	return pathBinding(p, buyer), nil
}

func pathBinding(p catalogue.Product, buyer int64) string {
	var opens time.Time
	if p.StartsAt != nil {
		opens = *p.StartsAt
	}
	return admission.PathBinding(p.ID, buyer, opens)
}

// pathFor says whether p's purchases take path tokens this service issues.
func (d *Door) pathFor(p catalogue.Product) error {
	switch {
	case !p.Path:
		return fmt.Errorf("%w: product %d sells without a purchase path: buy it directly", ErrInvalid, p.ID)
	case d.paths == nil:
		return fmt.Errorf("%w: product %d asks for a purchase path and this service issues none", ErrNoPaths, p.ID)
	}
	return nil
}

// PathRequest asks for a purchase path token: a buyer's, for a product,
// with the captcha solved when the product asks for one.
type PathRequest struct {
	Buyer, Product     int64
	CaptchaID, Captcha string
}

// failed reports whether a purchase ended without an answer about the sale
// (a backend's error, a timeout, a lock not obtained): the limit must not
// grow on such outcomes. Sold out, already bought and bad input are answers.
func failed(err error) bool {
	switch {
	case err == nil, errors.Is(err, stock.ErrSoldOut), errors.Is(err, ErrSoldOutForNow),
		errors.Is(err, stock.ErrAlreadyBought), errors.Is(err, ErrInvalid), errors.Is(err, ErrNotFound):
		return false
	}
	return true
}
