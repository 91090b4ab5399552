package lock

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed setnx_expire.lua
var setnxExpireLua string

var setnxExpireScript = redis.NewScript(setnxExpireLua)

// LuaSetNX runs SETNX and PEXPIRE in one Lua script: Redis runs a script
// atomically, so there is no lock without a TTL any more. The value is the
// same for everyone, though, so the lock has no owner: release is a plain
// DEL that deletes whoever holds the lock now, which a retried or late
// release does to the next holder.
//
// Round trips: one per attempt to acquire, one to release.
type LuaSetNX struct {
	rdb redis.Cmdable
}

var _ Locker = (*LuaSetNX)(nil)

// NewLuaSetNX returns a scripted SETNX-and-EXPIRE lock on rdb.
func NewLuaSetNX(rdb redis.Cmdable) *LuaSetNX { return &LuaSetNX{rdb: rdb} }

// Acquire sets key with a TTL if it is absent.
func (s *LuaSetNX) Acquire(ctx context.Context, key string, opt Options) (Lease, error) {
	ttl := opt.ttl().Milliseconds()
	err := retry(ctx, opt.Wait, func() (bool, error) {
		n, err := setnxExpireScript.Run(ctx, s.rdb, []string{key}, ttl).Int()
		if err != nil {
			return false, fmt.Errorf("lock %s: SETNX+PEXPIRE script: %w", key, err)
		}
		return n == 1, nil
	})
	if err != nil {
		return nil, err
	}
	return &delLease{rdb: s.rdb, key: key}, nil
}
