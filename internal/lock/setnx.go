package lock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// SetNX is the first lock anyone writes on Redis: SETNX key 1, and DEL to
// release. It is shared by every process, which fixes local, and it has no
// expiry: a holder that dies before its DEL leaves the lock held forever,
// and every later Acquire fails until someone deletes the key by hand.
// Options.TTL is ignored.
//
// Round trips: one per attempt to acquire, one to release.
type SetNX struct {
	rdb redis.Cmdable
}

var _ Locker = (*SetNX)(nil)

// NewSetNX returns a SETNX lock on rdb.
func NewSetNX(rdb redis.Cmdable) *SetNX { return &SetNX{rdb: rdb} }

// Acquire sets key if it is absent.
func (s *SetNX) Acquire(ctx context.Context, key string, opt Options) (Lease, error) {
	if err := setnx(ctx, s.rdb, key, 0, opt.Wait); err != nil {
		return nil, err
	}
	return &delLease{rdb: s.rdb, key: key}, nil
}

// setnx sets key to 1 if it is absent, with SETNX when ttl is 0 and with
// SET NX PX otherwise, retrying for up to wait: the acquisition of every
// strategy whose value is the same for all holders.
func setnx(ctx context.Context, rdb redis.Cmdable, key string, ttl, wait time.Duration) error {
	return retry(ctx, wait, func() (bool, error) {
		ok, err := rdb.SetNX(ctx, key, 1, ttl).Result()
		if err != nil {
			return false, fmt.Errorf("lock %s: SET NX: %w", key, err)
		}
		return ok, nil
	})
}

// delLease is released by a plain DEL, the release of every strategy whose
// value does not say who holds the lock: it deletes whoever holds it now.
type delLease struct {
	rdb redis.Cmdable
	key string
}

// Release deletes the key. It can tell only that the key was already gone
// (ErrNotHeld), never whether the lock it deleted was this holder's.
func (l *delLease) Release(ctx context.Context) error {
	n, err := l.rdb.Del(ctx, l.key).Result()
	if err != nil {
		return fmt.Errorf("lock %s: DEL: %w", l.key, err)
	}
	if n == 0 {
		return ErrNotHeld
	}
	return nil
}

func (l *delLease) Token() uint64 { return 0 }
