package order

import (
	"errors"
	"fmt"
	"time"

	"seckill/internal/catalogue"
)

// Refusals of a purchase outside its product's sale window.
var (
	// ErrNotStarted: the sale opens later; the error is a *NotStartedError.
	ErrNotStarted = errors.New("order: the sale has not started")
	// ErrSaleEnded: the sale's window closed.
	ErrSaleEnded = errors.New("order: the sale has ended")
)

// NotStartedError is ErrNotStarted with the opening and the service's
// clock when it refused, so that a client can count down on that clock.
type NotStartedError struct {
	Product  int64
	StartsAt time.Time
	Now      time.Time
}

func (e *NotStartedError) Error() string {
	return fmt.Sprintf("%v: product %d opens at %s, in %s", ErrNotStarted, e.Product,
		e.StartsAt.Format(time.RFC3339Nano), e.StartsAt.Sub(e.Now).Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrNotStarted) true.
func (e *NotStartedError) Is(target error) bool { return target == ErrNotStarted }

// window refuses a purchase outside p's sale window: from the cached
// product alone, before anything that costs a round trip (the rate limit,
// the id, the take), so that the buyers who click before the opening cost
// the service nothing else. Paying and cancelling never ask it.
func (s *Service) window(p catalogue.Product) error {
	now := s.opt.Now()
	switch {
	case p.StartsAt != nil && now.Before(*p.StartsAt):
		return &NotStartedError{Product: p.ID, StartsAt: *p.StartsAt, Now: now}
	case p.EndsAt != nil && !now.Before(*p.EndsAt):
		return fmt.Errorf("%w: product %d's sale ended at %s", ErrSaleEnded, p.ID, p.EndsAt.Format(time.RFC3339Nano))
	}
	return nil
}

// Now is the service's clock (Options.Now): the one its sale windows are
// read on, which a product view shows so that a page counts down on it.
func (s *Service) Now() time.Time { return s.opt.Now() }
