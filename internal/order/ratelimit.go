package order

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrRateLimited: the user sent a purchase within the rate-limit period.
var ErrRateLimited = errors.New("order: rate limited")

// rateLimit lets one purchase request per user through per period: SET NX
// PX, one round trip, and the key expires by itself. A period of 0 lets
// everything through.
type rateLimit struct {
	rdb    redis.Cmdable
	period time.Duration
}

func (r rateLimit) allow(ctx context.Context, user int64) error {
	if r.period <= 0 {
		return nil
	}
	ok, err := r.rdb.SetNX(ctx, "seckill:rate:"+strconv.FormatInt(user, 10), 1, r.period).Result()
	if err != nil {
		return fmt.Errorf("checking the rate limit of user %d: %w", user, err)
	}
	if !ok {
		return fmt.Errorf("%w: one order request per %s", ErrRateLimited, r.period)
	}
	return nil
}
