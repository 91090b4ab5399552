package order

import (
	"errors"
	"time"

	"seckill/internal/catalogue"
	"seckill/internal/stock"
)

// shed asks Options.Limit to admit a purchase of p; done reports the
// purchase's outcome to it. A lab product's purchases are never shed: the
// lab shows what the locks do at any concurrency, and shedding would hide
// the races it is there to show. Nor is a purchase of a product this
// process knows is sold out: its answer (409) costs no Redis and is final,
// and a buyer told "overloaded" would try again for nothing.
func (s *Service) shed(p catalogue.Product) (done func(error), err error) {
	if s.opt.Limit == nil || p.Lab || s.cat.SoldOut(p.ID) {
		return func(error) {}, nil
	}
	release, err := s.opt.Limit.Acquire()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	return func(err error) { release(time.Since(start), failed(err)) }, nil
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
