package order

import (
	"context"
	"errors"
	"fmt"
	"time"

	"seckill/internal/catalogue"
	"seckill/internal/stock"
)

// ErrSoldOutForNow: the store is empty, and units taken by purchases whose
// outcome is unknown may come back once the reconciler settles them. Not
// stock.ErrSoldOut: the buyer (and the edge gate, which learns sold out
// from the answers) must not take it for final.
var ErrSoldOutForNow = errors.New("order: sold out for now: units of purchases whose outcome is unknown may come back")

// SoldOutForNowError is ErrSoldOutForNow with when to ask again.
type SoldOutForNowError struct {
	RetryAfter time.Duration
}

func (e *SoldOutForNowError) Error() string {
	return fmt.Sprintf("%v; try again in %s", ErrSoldOutForNow, e.RetryAfter)
}

// Is makes errors.Is(err, ErrSoldOutForNow) true.
func (e *SoldOutForNowError) Is(target error) bool { return target == ErrSoldOutForNow }

// RetryIn is when to try again: the Retry-After the buyer is told.
func (e *SoldOutForNowError) RetryIn() time.Duration { return e.RetryAfter }

// answer notes a purchase whose outcome is unknown among its layout's
// unsettled orders, and turns a sold out into ErrSoldOutForNow while the
// layout has any: in Redis, or held by this process because Redis has not
// taken them yet (marks.go). When Redis cannot say, the sold out is not
// final either: a final answer must be known.
func (s *Service) answer(ctx context.Context, p catalogue.Product, err error) error {
	if p.Store != string(stock.InRedis) {
		return err // the db modes take and write in one transaction
	}
	l := p.Stock().Layout
	var unsettled *UnsettledError
	switch {
	case errors.As(err, &unsettled):
		s.marks.mark(ctx, l, unsettled.Order)
	case errors.Is(err, stock.ErrSoldOut):
		if s.marks.holds(l) {
			return &SoldOutForNowError{RetryAfter: s.retryAfter()}
		}
		if some, aerr := s.stock.Ledgers().AnyUnsettled(ctx, l); aerr != nil || some {
			return &SoldOutForNowError{RetryAfter: s.retryAfter()}
		}
	}
	return err
}

// retryAfter is when units of unsettled purchases may have come back: the
// reconciler's next pass.
func (s *Service) retryAfter() time.Duration {
	if s.opt.ReconcileEvery > 0 {
		return s.opt.ReconcileEvery
	}
	return DefaultReconcileEvery
}
