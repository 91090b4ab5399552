package order

import (
	"errors"
	"fmt"
	"time"
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

// Now is the service's clock (Options.Now): the one its sale windows are
// read on, which a product view shows so that a page counts down on it.
func (s *Service) Now() time.Time { return s.opt.Now() }
