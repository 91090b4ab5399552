package app

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/redis/go-redis/v9"

	"seckill/internal/server"
)

// OperatorTokenKey is where the operator token lives in Redis when
// ADMIN_TOKEN is not set: the first process to start on a Redis makes it,
// and every process on that Redis reads the same one.
const OperatorTokenKey = server.OperatorTokenKey

// operatorToken returns the operator's credential: ADMIN_TOKEN when set;
// else the one kept in Redis, made by this process (SET NX) when there is
// none, so that every instance sharing the Redis asks for the same token.
// made reports that this process made it: it alone prints it.
func operatorToken(ctx context.Context, rdb redis.UniversalClient, configured string) (token string, made bool, err error) {
	if configured != "" {
		return configured, false, nil
	}
	fresh := rand.Text()
	made, err = rdb.SetNX(ctx, OperatorTokenKey, fresh, 0).Result()
	if err != nil {
		return "", false, fmt.Errorf("keeping the operator token in Redis (%s): %w", OperatorTokenKey, err)
	}
	if made {
		return fresh, true, nil
	}
	if token, err = rdb.Get(ctx, OperatorTokenKey).Result(); err != nil {
		return "", false, fmt.Errorf("reading the operator token from Redis (%s): %w", OperatorTokenKey, err)
	}
	return token, false, nil
}
