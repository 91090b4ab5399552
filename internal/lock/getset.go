package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// GetSet is the lock the Redis SETNX documentation taught before SET NX PX
// existed. The value is the lock's expiry, a Unix time in milliseconds, and
// the key has no TTL. A waiter that reads a stamp in the past takes over
// with GETSET, and has won only if the old value GETSET returns is the stamp
// it read: of two waiters racing for the same expired lock, one gets the
// other's fresh stamp back and knows it lost.
//
// What it breaks: expiry is judged by each client's clock, so a client whose
// clock runs ahead (Fault.ClockSkew) takes over a live lock; the loser's
// GETSET has overwritten the winner's stamp; and release is a plain DEL,
// which anyone may send.
//
// Round trips: one for an attempt that finds the key absent, two for one
// that finds it live, three for a takeover; one to release.
type GetSet struct {
	rdb redis.Cmdable
}

var _ Locker = (*GetSet)(nil)

// NewGetSet returns a GETSET-takeover lock on rdb.
func NewGetSet(rdb redis.Cmdable) *GetSet { return &GetSet{rdb: rdb} }

// Acquire sets key to its expiry stamp if absent, or takes it over if the
// stamp it holds has passed by this client's clock.
func (g *GetSet) Acquire(ctx context.Context, key string, opt Options) (Lease, error) {
	ttl := opt.ttl()
	now := func() time.Time { return time.Now().Add(opt.Fault.ClockSkew) }
	err := retry(ctx, opt.Wait, func() (bool, error) {
		stamp := now().Add(ttl).UnixMilli()
		ok, err := g.rdb.SetNX(ctx, key, stamp, 0).Result()
		if err != nil {
			return false, fmt.Errorf("lock %s: SETNX: %w", key, err)
		}
		if ok {
			return true, nil
		}
		seen, err := g.rdb.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			return false, nil // released since the SETNX: try again
		}
		if err != nil {
			return false, fmt.Errorf("lock %s: GET: %w", key, err)
		}
		if expiry, err := strconv.ParseInt(seen, 10, 64); err == nil && expiry > now().UnixMilli() {
			return false, nil // still held
		}
		old, err := g.rdb.GetSet(ctx, key, stamp).Result()
		if errors.Is(err, redis.Nil) {
			// Released between GET and GETSET, and GETSET has just set our
			// stamp on the absent key: the lock is ours.
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("lock %s: GETSET: %w", key, err)
		}
		return old == seen, nil
	})
	if err != nil {
		return nil, err
	}
	return &delLease{rdb: g.rdb, key: key}, nil
}
