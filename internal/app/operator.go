package app

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"seckill/internal/server"
	"seckill/internal/session"
)

// OperatorTokenKey is where the operator token is copied in Redis when
// ADMIN_TOKEN is not set, for the operator to read (redis-cli GET).
const OperatorTokenKey = server.OperatorTokenKey

// The secrets' names in SQL.
const (
	operatorTokenName = "operator-token"
	sessionSecretName = "session-secret"
)

// secret is one of the service's secrets made at start, kept in SQL: the
// database is the source of truth, Redis a copy. Kept in Redis alone, a
// Redis restarted empty split them (issue 36, finding 8): the instances
// running kept the old ones in memory, one started after made new ones, and
// buyers' tokens were refused by half the instances, two operator tokens
// valid at once. The database outlives a Redis wipe, so every instance,
// started before or after it, reads the same.
type secret struct {
	Name  string `gorm:"primaryKey;size:64"`
	Value string `gorm:"size:128;not null"` // base64 (standard) of the secret's bytes
}

func (secret) TableName() string { return "secrets" }

// migrateSecrets creates the secrets' table.
func migrateSecrets(ctx context.Context, db *gorm.DB) error {
	if err := db.WithContext(ctx).AutoMigrate(&secret{}); err != nil {
		return fmt.Errorf("migrating the secrets' table: %w", err)
	}
	return nil
}

// operatorToken returns the operator's credential: ADMIN_TOKEN when set;
// else the one kept in SQL, made by this process when there is none.
// made reports that this process made it: it alone prints it.
func operatorToken(ctx context.Context, db *gorm.DB, rdb redis.UniversalClient, configured string) (token string, made bool, err error) {
	if configured != "" {
		return configured, false, nil
	}
	token, made, err = kept(ctx, db, rdb, operatorTokenName, OperatorTokenKey, rand.Text())
	if err != nil {
		return "", false, fmt.Errorf("the operator token: %w", err)
	}
	return token, made, nil
}

// sessionSecret returns the key that signs buyers' tokens: SESSION_SECRET
// when set; else the one kept in SQL, as the operator token is, so that
// every instance accepts the others' tokens.
func sessionSecret(ctx context.Context, db *gorm.DB, rdb redis.UniversalClient, configured string) ([]byte, error) {
	if configured != "" {
		return []byte(configured), nil
	}
	fresh := make([]byte, session.SecretBytes)
	rand.Read(fresh) // never fails (crypto/rand)
	value, _, err := kept(ctx, db, rdb, sessionSecretName, session.SecretKey, string(fresh))
	if err != nil {
		return nil, fmt.Errorf("the buyers' session secret: %w", err)
	}
	return []byte(value), nil
}

// kept returns the secret name kept in SQL, storing one when there is none:
// the value an earlier version kept at the Redis key redisKey (the
// instances running use it), else fresh; made reports that it is fresh.
// Instances starting at once insert theirs at once: one row wins, and each
// returns what the database kept. The value is copied to redisKey, where
// the operator reads the token.
func kept(ctx context.Context, db *gorm.DB, rdb redis.UniversalClient, name, redisKey, fresh string) (value string, made bool, err error) {
	value, found, err := readSecret(ctx, db, name)
	if err != nil {
		return "", false, err
	}
	if !found {
		candidate := fresh
		earlier, err := rdb.Get(ctx, redisKey).Result()
		switch {
		case err == nil:
			candidate = earlier
		case !errors.Is(err, redis.Nil):
			return "", false, fmt.Errorf("reading the copy in Redis (%s): %w", redisKey, err)
		}
		row := secret{Name: name, Value: base64.StdEncoding.EncodeToString([]byte(candidate))}
		res := db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&row)
		if res.Error != nil {
			return "", false, fmt.Errorf("keeping %s in SQL: %w", name, res.Error)
		}
		if value, found, err = readSecret(ctx, db, name); err != nil {
			return "", false, err
		}
		if !found {
			return "", false, fmt.Errorf("%s: stored in SQL and not found there", name)
		}
		made = res.RowsAffected == 1 && candidate == fresh
	}
	// A copy: Redis may have lost it (restarted empty) or, from an earlier
	// version, hold another; the database's wins.
	if err := rdb.Set(ctx, redisKey, value, 0).Err(); err != nil {
		return "", false, fmt.Errorf("copying %s to Redis (%s): %w", name, redisKey, err)
	}
	return value, made, nil
}

// readSecret reads the secret name from SQL; found is false without one.
func readSecret(ctx context.Context, db *gorm.DB, name string) (value string, found bool, err error) {
	var rows []secret
	if err := db.WithContext(ctx).Where("name = ?", name).Limit(1).Find(&rows).Error; err != nil {
		return "", false, fmt.Errorf("reading %s from SQL: %w", name, err)
	}
	if len(rows) == 0 {
		return "", false, nil
	}
	b, err := base64.StdEncoding.DecodeString(rows[0].Value)
	if err != nil {
		return "", false, fmt.Errorf("reading %s from SQL: not base64: %w", name, err)
	}
	return string(b), true, nil
}
