package lock

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// SetNXExpire adds the missing expiry to SetNX as a second command: SETNX,
// then PEXPIRE (EXPIRE in milliseconds, so that the lab's short TTLs work).
// A dead holder's lock now expires, except when the holder dies between the
// two commands: then the key stays with no TTL, and the lock is lost forever
// as with SetNX. Fault.CrashBeforeExpire makes that happen on demand.
//
// Round trips: one per failed attempt, two for the successful one; one to
// release.
type SetNXExpire struct {
	rdb redis.Cmdable
}

var _ Locker = (*SetNXExpire)(nil)

// NewSetNXExpire returns a SETNX-then-EXPIRE lock on rdb.
func NewSetNXExpire(rdb redis.Cmdable) *SetNXExpire { return &SetNXExpire{rdb: rdb} }

// Acquire sets key if it is absent, then gives it the TTL.
func (s *SetNXExpire) Acquire(ctx context.Context, key string, opt Options) (Lease, error) {
	if err := setnx(ctx, s.rdb, key, 0, opt.Wait); err != nil {
		return nil, err
	}
	if opt.Fault.CrashBeforeExpire {
		return nil, fmt.Errorf("lock %s: after SETNX, before PEXPIRE: %w", key, ErrCrashed)
	}
	// A failure here leaves the key without a TTL too; the naive version
	// this rung stands for does not clean up, and neither do we.
	if err := s.rdb.PExpire(ctx, key, opt.ttl()).Err(); err != nil {
		return nil, fmt.Errorf("lock %s: PEXPIRE: %w", key, err)
	}
	return &delLease{rdb: s.rdb, key: key}, nil
}
