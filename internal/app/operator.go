package app

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strings"

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

// operatorToken returns the operator's credential kept in SQL, made from
// fresh by this process when there is none; made reports that it is fresh.
// ADMIN_TOKEN, when set, is used without it (App.operator).
func operatorToken(ctx context.Context, db *gorm.DB, rdb redis.UniversalClient, fresh string) (token string, made bool, err error) {
	token, made, err = kept(ctx, db, rdb, operatorTokenName, OperatorTokenKey, fresh)
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

// operator returns the operator's token: ADMIN_TOKEN when set, else the one
// kept in SQL (with a copy in Redis); on the embedded default, where SQL
// and Redis are in memory, the one kept in Config.DataDir. It sets
// a.tokenNote, which the serving line says.
func (a *App) operator(ctx context.Context) (string, error) {
	if a.Config.AdminToken != "" {
		a.tokenNote = "operator token: the one -admin-token (ADMIN_TOKEN) gives"
		if len(a.Config.AdminToken) < minTokenLen {
			// The class token is an HMAC keyed by it: whoever holds the
			// class token can test guesses of a short one offline.
			a.log.Warn("the operator token (ADMIN_TOKEN) is short: the class token, which students hold, lets them test guesses of it "+
				"without asking the service; use 16 random characters or more", "length", len(a.Config.AdminToken))
		}
		return a.Config.AdminToken, nil
	}
	fresh, file := rand.Text(), ""
	if a.keepsNothing() {
		var err error
		if fresh, file, err = a.tokenFromDir(); err != nil {
			return "", err
		}
	}
	token, made, err := operatorToken(ctx, a.db, a.rdb, fresh)
	if err != nil {
		return "", err
	}
	read := redisCLI(a.RedisAddr(), len(a.Config.RedisCluster) > 0) + " GET " + OperatorTokenKey
	switch {
	case file != "":
		a.tokenNote = "operator token " + token + " (kept in " + file + ")"
	case a.keepsNothing():
		a.tokenNote = "operator token " + token + " (a new one at each start: -data-dir is empty)"
	case made || a.embedded != nil:
		// Said in full once, by the instance that made it, or on a Redis
		// of this process's own: this machine's lab.
		a.tokenNote = "operator token " + token + " (kept in the database; " + read + ")"
	default:
		a.tokenNote = "operator token: " + read
	}
	a.Config.AdminToken = token
	return token, nil
}

// keepsNothing reports the embedded default: Redis and SQLite both in this
// process's memory, so that nothing of it is on disk.
func (a *App) keepsNothing() bool {
	return a.embedded != nil && a.Config.MySQLDSN == "" && a.Config.SQLitePath == ""
}

// tokenFromDir returns the token kept in Config.DataDir and its file, or a
// fresh token and "" when there is no directory or it cannot be written: a
// lab that cannot keep its token still starts, with a new one. A file that
// is there and refused (others may read it, it holds no token) stops the
// start, saying how to mend it.
func (a *App) tokenFromDir() (token, file string, err error) {
	if a.Config.DataDir == "" {
		return rand.Text(), "", nil
	}
	token, file, made, err := tokenInDir(a.Config.DataDir)
	if errors.Is(err, errTokenFile) {
		return "", "", err
	}
	if err != nil {
		a.log.Warn("the operator token is not kept: a new one at each start", "error", err)
		return rand.Text(), "", nil
	}
	if made {
		a.log.Info("made an operator token and kept it for the next starts", "file", file)
	}
	return token, file, nil
}

// redisCLI is the redis-cli command that reaches the Redis at addr (the
// first node of a comma-separated list).
func redisCLI(addr string, cluster bool) string {
	cmd := "redis-cli"
	if cluster {
		cmd += " -c"
	}
	first, _, _ := strings.Cut(addr, ",")
	if host, port, err := net.SplitHostPort(first); err == nil {
		cmd += " -h " + host + " -p " + port
	}
	return cmd
}

// OperatorTokenNote says the operator token, or where to read it, for the
// serving line: the token itself when this process made it, keeps it in a
// file or runs the Redis; the redis-cli command that reads it otherwise;
// never the token set by -admin-token (ADMIN_TOKEN), which the operator has.
func (a *App) OperatorTokenNote() string { return a.tokenNote }

// ClassTokenNote says the class token, which students type to run the
// course's lessons and send their answers, for the serving line; "" before
// the operator token is known.
func (a *App) ClassTokenNote() string {
	if a.Config.AdminToken == "" {
		return ""
	}
	return "class token " + server.ClassToken(a.Config.AdminToken) + " (students')"
}
