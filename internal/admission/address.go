package admission

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed windows.lua
	windowsLua    string
	windowsScript = redis.NewScript(windowsLua)
)

// PerAddress lets at most Limit requests per client address through per
// period, counted in a fixed window in Redis (INCR, and PEXPIRE on the
// first: one round trip), so every process behind one gate shares the
// count. It stops the client that signs in as many buyers, which the
// per-buyer limit cannot see; the address is the client's as the server
// knows it, so behind a proxy it must come from a trusted X-Forwarded-For
// (see server.Deps.TrustedProxies). A limit of 0 lets everything through.
type PerAddress struct {
	rdb    redis.Cmdable
	limit  int
	period time.Duration
}

// NewPerAddress returns the limit of limit requests per address per period
// (a second when period is under a millisecond), kept in rdb.
func NewPerAddress(rdb redis.Cmdable, limit int, period time.Duration) *PerAddress {
	if period < time.Millisecond {
		period = time.Second
	}
	return &PerAddress{rdb: rdb, limit: limit, period: period}
}

// Allow lets a request from addr in, or refuses it with an
// *AddressLimitedError (ErrRateLimited).
func (r *PerAddress) Allow(ctx context.Context, addr string) error {
	if r.limit <= 0 {
		return nil
	}
	now, period := time.Now().UnixMilli(), r.period.Milliseconds()
	window := now / period
	key := "seckill:rate:addr:" + addr + ":" + strconv.FormatInt(window, 10)
	n, err := windowsScript.Run(ctx, r.rdb, []string{key}, period).Int64Slice()
	if err != nil {
		return fmt.Errorf("checking the rate limit of address %s: %w", addr, err)
	}
	if n[0] > int64(r.limit) {
		return &AddressLimitedError{Limit: r.limit, Period: r.period, RetryAfter: time.Duration((window+1)*period-now) * time.Millisecond}
	}
	return nil
}

// AddressLimitedError is PerAddress's refusal: ErrRateLimited, with the
// rest of the window, after which the address is let in again.
type AddressLimitedError struct {
	Limit              int
	Period, RetryAfter time.Duration
}

func (e *AddressLimitedError) Error() string {
	return fmt.Sprintf("%v: at most %d requests per %s from one address", ErrRateLimited, e.Limit, e.Period)
}

// Is makes errors.Is(err, ErrRateLimited) true.
func (e *AddressLimitedError) Is(target error) bool { return target == ErrRateLimited }

// RetryIn is when to try again: the Retry-After the client is told.
func (e *AddressLimitedError) RetryIn() time.Duration { return e.RetryAfter }
