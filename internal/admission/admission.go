// Package admission decides whether a purchase is let in before it touches
// the stock: the refusals that cost one round trip, so that a buyer who
// hammers the button does not cost a lock and a script each time
// (PerBuyer), and those that cost none, so that a service past its capacity
// answers the purchases it admits fast and sheds the rest (Gradient, an
// adaptive concurrency limit of our own: see gradient.go for why and whence).
package admission

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrRateLimited: the buyer sent a purchase within the rate-limit period.
var ErrRateLimited = errors.New("admission: rate limited")

// PerBuyer lets one purchase request per buyer and product through per
// period: SET NX PX, one round trip, and the key expires by itself.
// Processes sharing the Redis share the limit. The key is the buyer's for
// one product, so that a buyer hammering a sold-out product keeps that
// product's key busy, not their turn at another. A period of 0 lets
// everything through.
type PerBuyer struct {
	rdb    redis.Cmdable
	period time.Duration
}

// NewPerBuyer returns the limit of one request per buyer and product per
// period, kept in rdb.
func NewPerBuyer(rdb redis.Cmdable, period time.Duration) *PerBuyer {
	return &PerBuyer{rdb: rdb, period: period}
}

// PerBuyerKey is the key that holds buyer's turn at product.
func PerBuyerKey(buyer, product int64) string {
	return "seckill:rate:" + strconv.FormatInt(product, 10) + ":" + strconv.FormatInt(buyer, 10)
}

// Allow lets buyer's request for product in, or refuses it with
// ErrRateLimited.
func (r *PerBuyer) Allow(ctx context.Context, buyer, product int64) error {
	if r.period <= 0 {
		return nil
	}
	ok, err := r.rdb.SetNX(ctx, PerBuyerKey(buyer, product), 1, r.period).Result()
	if err != nil {
		return fmt.Errorf("checking the rate limit of user %d for product %d: %w", buyer, product, err)
	}
	if !ok {
		return fmt.Errorf("%w: one order request per %s for a product", ErrRateLimited, r.period)
	}
	return nil
}
