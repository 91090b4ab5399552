package lock

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed fenced_get.lua
var fencedGetLua string

var fencedGetScript = redis.NewScript(fencedGetLua)

// FencedGet reads key as the holder of token and records token as the
// highest key has seen, so that a holder with an older token can no longer
// FencedSet it. It returns ErrStaleToken if a newer token was seen already,
// and redis.Nil if key is absent. Read with FencedGet and write with
// FencedSet, and a read-modify-write is safe even when leases expire.
//
// Round trips: one.
func FencedGet(ctx context.Context, rdb redis.Scripter, key string, token uint64) (string, error) {
	res, err := fencedGetScript.Run(ctx, rdb, []string{key, fenceKey(key)}, token).Slice()
	if err != nil {
		return "", fmt.Errorf("fenced get %s: %w", key, err)
	}
	if len(res) == 0 || res[0] == int64(0) {
		return "", ErrStaleToken
	}
	if len(res) < 2 || res[1] == nil {
		return "", redis.Nil
	}
	v, ok := res[1].(string)
	if !ok {
		return "", fmt.Errorf("fenced get %s: unexpected reply %T", key, res[1])
	}
	return v, nil
}

//go:embed fenced_incr.lua
var fencedIncrLua string

var fencedIncrScript = redis.NewScript(fencedIncrLua)

// FencedIncr adds delta to key as the holder of token, and records token as
// the highest seen, under the same rule as FencedSet: a holder with an older
// token can no longer write key afterwards, so a unit given back cannot be
// overwritten by a stale read-modify-write. It returns ErrStaleToken if a
// newer token was seen already.
//
// Round trips: one.
func FencedIncr(ctx context.Context, rdb redis.Scripter, key string, delta int64, token uint64) error {
	n, err := fencedIncrScript.Run(ctx, rdb, []string{key, fenceKey(key)}, delta, token).Int()
	if err != nil {
		return fmt.Errorf("fenced incr %s: %w", key, err)
	}
	if n == 0 {
		return ErrStaleToken
	}
	return nil
}
