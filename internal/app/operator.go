package app

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/redis/go-redis/v9"

	"seckill/internal/server"
	"seckill/internal/session"
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
	token, made, err = keptInRedis(ctx, rdb, OperatorTokenKey, rand.Text())
	if err != nil {
		return "", false, fmt.Errorf("the operator token: %w", err)
	}
	return token, made, nil
}

// sessionSecret returns the key that signs buyers' tokens: SESSION_SECRET
// when set; else the one kept in Redis, made by the first instance, as
// the operator token is, so that every instance accepts the others' tokens.
func sessionSecret(ctx context.Context, rdb redis.UniversalClient, configured string) ([]byte, error) {
	if configured != "" {
		return []byte(configured), nil
	}
	fresh := make([]byte, session.SecretBytes)
	rand.Read(fresh) // never fails (crypto/rand)
	secret, _, err := keptInRedis(ctx, rdb, session.SecretKey, string(fresh))
	if err != nil {
		return nil, fmt.Errorf("the buyers' session secret: %w", err)
	}
	return []byte(secret), nil
}

// keptInRedis stores fresh at key unless a value is there (SET NX) and
// returns the value kept; made reports that it is fresh.
func keptInRedis(ctx context.Context, rdb redis.UniversalClient, key, fresh string) (value string, made bool, err error) {
	made, err = rdb.SetNX(ctx, key, fresh, 0).Result()
	if err != nil {
		return "", false, fmt.Errorf("keeping it in Redis (%s): %w", key, err)
	}
	if made {
		return fresh, true, nil
	}
	if value, err = rdb.Get(ctx, key).Result(); err != nil {
		return "", false, fmt.Errorf("reading it from Redis (%s): %w", key, err)
	}
	return value, false, nil
}
