package lock

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// SetNXPX is SET key 1 NX PX ttl: since Redis 2.6.12 one native command does
// what LuaSetNX needs a script for. The value is still fixed and the release
// still a DEL, so a holder paused past its TTL, on waking, deletes the lock
// of the holder that came after it, and a third one enters beside the
// second.
//
// Round trips: one per attempt to acquire, one to release.
type SetNXPX struct {
	rdb redis.Cmdable
}

var _ Locker = (*SetNXPX)(nil)

// NewSetNXPX returns a SET NX PX lock with a fixed value on rdb.
func NewSetNXPX(rdb redis.Cmdable) *SetNXPX { return &SetNXPX{rdb: rdb} }

// Acquire sets key with a TTL if it is absent.
func (s *SetNXPX) Acquire(ctx context.Context, key string, opt Options) (Lease, error) {
	if err := setnx(ctx, s.rdb, key, opt.ttl(), opt.Wait); err != nil {
		return nil, err
	}
	return &delLease{rdb: s.rdb, key: key}, nil
}
