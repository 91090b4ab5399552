package app

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

func openRedis(ctx context.Context, addr string) (*redis.Client, error) {
	return pingRedis(ctx, redis.NewClient(&redis.Options{
		Addr: addr,
		// A flash sale is many short commands from many goroutines at once;
		// the default pool (10 per CPU) would make buyers queue for a
		// connection before they queue for the lock.
		PoolSize:     256,
		MinIdleConns: 8,
		DialTimeout:  2 * time.Second,
		ReadTimeout:  2 * time.Second,
		WriteTimeout: 2 * time.Second,
	}))
}

// openNode connects to a redlock node. Redlock waits only a few tens of
// milliseconds for each node, so a dead node must fail at once rather than
// be dialled again and again.
func openNode(ctx context.Context, addr string) (*redis.Client, error) {
	return pingRedis(ctx, redis.NewClient(&redis.Options{
		Addr:          addr,
		PoolSize:      256,
		DialTimeout:   500 * time.Millisecond,
		DialerRetries: 1,
		ReadTimeout:   time.Second,
		WriteTimeout:  time.Second,
	}))
}

func pingRedis(ctx context.Context, rdb *redis.Client) (*redis.Client, error) {
	addr := rdb.Options().Addr
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("connecting to Redis at %s: %w", addr, err)
	}
	return rdb, nil
}

func openSQL(ctx context.Context, dsn, sqlitePath string) (*gorm.DB, error) {
	cfg := &gorm.Config{
		TranslateError: true, // duplicate keys become gorm.ErrDuplicatedKey on every driver
		// One INSERT is atomic by itself: GORM's default BEGIN/COMMIT around
		// every write would triple the round trips of each order.
		SkipDefaultTransaction: true,
		Logger:                 logger.Discard,
		PrepareStmt:            true,
	}
	var (
		db  *gorm.DB
		err error
	)
	if dsn != "" {
		db, err = gorm.Open(mysql.Open(withParseTime(dsn)), cfg)
	} else {
		db, err = gorm.Open(sqlite.Open(sqliteDSN(sqlitePath)), cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("opening the database: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	if dsn == "" {
		// SQLite has one writer at a time; one connection turns contention
		// into a queue instead of SQLITE_BUSY errors, and an in-memory
		// database exists only on its connection anyway.
		sqlDB.SetMaxOpenConns(1)
	} else {
		sqlDB.SetMaxOpenConns(ordersConns)
		sqlDB.SetMaxIdleConns(ordersConns)
		sqlDB.SetConnMaxLifetime(30 * time.Minute)
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("connecting to the database: %w", err)
	}
	return db, nil
}

// Connection budgets on MySQL. The two pools together stay well under the
// server's default max_connections (151), leaving room for other clients.
const (
	ordersConns = 48
	lockConns   = 48
)

// openLockSQL opens the mysql lock strategy's own pool (see
// order.Options.LockSQL). Each waiting purchase holds one of its
// connections; when all are taken, the next waiter queues for a connection
// as it would for the lock.
func openLockSQL(dsn string) (*sql.DB, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening the lock pool: %w", err)
	}
	db.SetMaxOpenConns(lockConns)
	db.SetMaxIdleConns(lockConns)
	return db, nil
}

func sqliteDSN(path string) string {
	pragmas := "_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)"
	if path == "" {
		return "file::memory:?" + pragmas
	}
	// WAL lets readers in other processes (the harness's instances) read
	// while one writes.
	return "file:" + path + "?" + pragmas + "&_pragma=journal_mode(WAL)"
}

// withParseTime adds parseTime=true, without which the MySQL driver hands
// GORM DATETIME columns as bytes it cannot scan into time.Time.
func withParseTime(dsn string) string {
	if strings.Contains(dsn, "parseTime=") {
		return dsn
	}
	if strings.Contains(dsn, "?") {
		return dsn + "&parseTime=true"
	}
	return dsn + "?parseTime=true"
}

func redisVersion(ctx context.Context, rdb *redis.Client, embedded bool) string {
	if embedded {
		return "miniredis (embedded)"
	}
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}

func sqlVersion(ctx context.Context, db *gorm.DB) string {
	var v string
	q := "SELECT VERSION()"
	if db.Dialector.Name() == "sqlite" {
		q = "SELECT sqlite_version()"
	}
	if err := db.WithContext(ctx).Raw(q).Scan(&v).Error; err != nil {
		return db.Dialector.Name() + " unknown"
	}
	return db.Dialector.Name() + " " + v
}
