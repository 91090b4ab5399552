package lock

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

//go:embed release.lua
var releaseLua string

var releaseScript = redis.NewScript(releaseLua)

// RedisClient is what the single-node Redis strategies need of a client.
type RedisClient interface {
	redis.Scripter
	SetNX(ctx context.Context, key string, value any, expiration time.Duration) *redis.BoolCmd
}

var _ RedisClient = (*redis.Client)(nil)

// Token is SET key <random token> NX PX ttl, released by a Lua
// compare-and-delete. Only the owner can release, and a crashed owner's lock
// expires. What it cannot fix: a holder paused past its TTL still believes it
// holds the lock while the next holder works (see Watchdog and Fenced).
//
// Round trips: one per attempt to acquire, one to release.
type Token struct {
	rdb RedisClient
}

var _ Locker = (*Token)(nil)

// NewToken returns a token lock on rdb.
func NewToken(rdb RedisClient) *Token { return &Token{rdb: rdb} }

// Acquire sets key to a fresh UUID if the key is absent.
func (t *Token) Acquire(ctx context.Context, key string, opt Options) (Lease, error) {
	value := uuid.NewString()
	ttl := opt.ttl()
	err := retry(ctx, opt.Wait, nil, func() (bool, error) {
		ok, err := t.rdb.SetNX(ctx, key, value, ttl).Result()
		if err != nil {
			return false, fmt.Errorf("lock %s: SET NX PX: %w", key, err)
		}
		return ok, nil
	})
	if err != nil {
		return nil, err
	}
	return &tokenLease{rdb: t.rdb, key: key, value: value}, nil
}

type tokenLease struct {
	rdb        RedisClient
	key, value string
}

func (l *tokenLease) Release(ctx context.Context) error {
	n, err := releaseScript.Run(ctx, l.rdb, []string{l.key}, l.value).Int()
	if err != nil {
		return fmt.Errorf("lock %s: release: %w", l.key, err)
	}
	if n == 0 {
		return ErrNotHeld
	}
	return nil
}

func (l *tokenLease) Token() uint64 { return 0 }
