package app

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/glebarez/sqlite"
	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"seckill/internal/embedded"
	"seckill/internal/order"
	"seckill/internal/reconcile"
)

// redisStep bounds one command to the main Redis, with the client's retry:
// order.Options.Step, the unit of a purchase's time budget.
const redisStep = 2 * (redisTimeout + 100*time.Millisecond)

const redisTimeout = 2 * time.Second

// onConnect is the Redis client's hook on each new connection (to any node
// of a cluster): once they exist, the order service's RedisConnected (the
// durability read again) and the reconciler's ServerSeen (a server not met
// before: the products wait for their repair).
// They are made after the client, on it.
type onConnect struct {
	rec atomic.Pointer[reconcile.Reconciler]
	svc atomic.Pointer[order.Service]
}

func (h *onConnect) hook(ctx context.Context, cn *redis.Conn) error {
	if s := h.svc.Load(); s != nil {
		if err := s.RedisConnected(ctx, cn); err != nil {
			return err
		}
	}
	if rec := h.rec.Load(); rec != nil {
		return rec.ServerSeen(ctx, cn)
	}
	return nil
}

func openRedis(ctx context.Context, addr string, h *onConnect) (*redis.Client, error) {
	return pingRedis(ctx, redis.NewClient(&redis.Options{
		Addr:      addr,
		OnConnect: h.hook,
		// A flash sale is many short commands from many goroutines at once;
		// the default pool (10 per CPU) would make buyers queue for a
		// connection before they queue for the lock.
		PoolSize:     256,
		MinIdleConns: 8,
		ReadTimeout:  redisTimeout,
		WriteTimeout: redisTimeout,
		// One retry, of a command whose answer did not come: every script
		// that takes or returns stock is idempotent (a second run finds the
		// first one's record), and so is a read; a retried lock acquisition
		// can only make a holder wait out its own lease (see LOCKS.md). A
		// Redis that is down must be said so at once, not after dialling
		// again and again: one dial, short.
		MaxRetries:    1,
		DialTimeout:   500 * time.Millisecond,
		DialerRetries: 1,
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

// openCluster connects to the Redis Cluster whose nodes addrs names. Each
// node named must answer and be a cluster node whose cluster is ok: a
// typo, or a plain Redis named by mistake, would otherwise surface later as
// requests failing for some slots only.
func openCluster(ctx context.Context, addrs []string, h *onConnect) (*redis.ClusterClient, error) {
	for _, addr := range addrs {
		if err := checkClusterNode(ctx, addr); err != nil {
			return nil, err
		}
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:     addrs,
		OnConnect: h.hook,
		// As openRedis, per node.
		PoolSize:      256,
		MinIdleConns:  8,
		ReadTimeout:   redisTimeout,
		WriteTimeout:  redisTimeout,
		DialTimeout:   500 * time.Millisecond,
		DialerRetries: 1,
		// A MOVED or ASK (a resharding, a failover) is followed, not
		// retried: up to 3 redirections, beside one retry of a command whose
		// answer did not come, as openRedis. While a node is down and not
		// yet replaced, its slots fail at once (503), not after waiting.
		MaxRedirects: 3,
		// The slot map is read again every second (one CLUSTER SLOTS per
		// second while commands flow): a command to a lost master fails
		// with a dial error, not a MOVED that would reload the map, so
		// after a failover the client would otherwise keep dialling the
		// dead node for a minute (go-redis's default).
		ClusterStateReloadInterval: time.Second,
	})
	if err := cc.Ping(ctx).Err(); err != nil {
		cc.Close()
		return nil, fmt.Errorf("connecting to the Redis Cluster at %s: %w", strings.Join(addrs, ","), err)
	}
	return cc, nil
}

func checkClusterNode(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 500 * time.Millisecond, DialerRetries: 1, MaxRetries: -1})
	defer c.Close()
	info, err := c.ClusterInfo(ctx).Result()
	switch {
	case err != nil && (strings.Contains(err.Error(), "cluster support disabled") || strings.Contains(err.Error(), "unknown command") || strings.Contains(err.Error(), "not supported")):
		return fmt.Errorf("Redis at %s is not in cluster mode (cluster-enabled no): -redis-cluster names the nodes of a Redis Cluster; for a single Redis use -redis", addr)
	case err != nil:
		return fmt.Errorf("connecting to Redis Cluster node %s: %w", addr, err)
	case !strings.Contains(info, "cluster_state:ok"):
		return fmt.Errorf("Redis Cluster node %s reports its cluster is not ok (cluster_state:fail: slots unassigned or a master down)", addr)
	}
	return nil
}

// openSQL opens the service's database: MySQL at dsn, else SQLite at
// sqlitePath, else SQLite in memory. closeDB closes it.
func openSQL(ctx context.Context, dsn, sqlitePath string) (_ *gorm.DB, closeDB func() error, err error) {
	cfg := &gorm.Config{
		TranslateError: true, // duplicate keys become gorm.ErrDuplicatedKey on every driver
		// One INSERT is atomic by itself: GORM's default BEGIN/COMMIT around
		// every write would triple the round trips of each order.
		SkipDefaultTransaction: true,
		Logger:                 logger.Discard,
		PrepareStmt:            true,
	}
	var (
		db   *gorm.DB
		keep io.Closer = io.NopCloser(nil)
	)
	switch {
	case dsn != "":
		db, err = gorm.Open(mysql.Open(mysqlDSN(dsn)), cfg)
	case sqlitePath != "":
		db, err = gorm.Open(sqlite.Open(sqliteDSN(sqlitePath)), cfg)
	default:
		var memory string
		if memory, keep, err = embedded.MemorySQLite(ctx, sqlitePragmas); err != nil {
			return nil, nil, err
		}
		db, err = gorm.Open(sqlite.Open(memory), cfg)
	}
	if err != nil {
		keep.Close()
		return nil, nil, fmt.Errorf("opening the database: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		keep.Close()
		return nil, nil, err
	}
	closeDB = func() error { return errors.Join(sqlDB.Close(), keep.Close()) }
	if dsn == "" {
		// SQLite has one writer at a time; one connection turns contention
		// into a queue instead of SQLITE_BUSY errors.
		sqlDB.SetMaxOpenConns(1)
	} else {
		sqlDB.SetMaxOpenConns(ordersConns)
		sqlDB.SetMaxIdleConns(ordersConns)
		sqlDB.SetConnMaxIdleTime(time.Minute)
		sqlDB.SetConnMaxLifetime(30 * time.Minute)
		// Tables in utf8mb4 whatever the server's default (MariaDB's is
		// latin1): a product named in Chinese must not be a 503.
		// Set returns a handle whose statement every chain on it would share
		// (a Where on it sticks to every later query): a session clones it.
		db = db.Set("gorm:table_options", "DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci").Session(&gorm.Session{})
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		closeDB()
		return nil, nil, fmt.Errorf("connecting to the database: %w", err)
	}
	return db, closeDB, nil
}

// ordersConns bounds the service's own pool on MySQL. With the mysql
// lock's pool (lock.DefaultMySQLConns) an instance holds at most 40
// connections: three instances stay inside MariaDB's default
// max_connections (151) with room for other clients.
const ordersConns = 24

const sqlitePragmas = "_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)"

func sqliteDSN(path string) string {
	// WAL lets readers in other processes (the harness's instances) read
	// while one writes.
	return "file:" + path + "?" + sqlitePragmas + "&_pragma=journal_mode(WAL)"
}

// mysqlDSN pins what the service needs of a MySQL connection, whatever the
// DSN says: parseTime, without which the driver hands GORM DATETIME columns
// as bytes it cannot scan into time.Time, and a utf8mb4 collation on every
// connection, so that any UTF-8 text round-trips whatever the server's
// default.
func mysqlDSN(dsn string) string {
	cfg, err := mysqldrv.ParseDSN(dsn)
	if err != nil {
		return dsn // gorm.Open reports it
	}
	cfg.ParseTime = true
	cfg.Collation = "utf8mb4_unicode_ci" // set in the handshake: no extra query
	return cfg.FormatDSN()
}

func redisVersion(ctx context.Context, rdb redis.UniversalClient, embedded bool) string {
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

// deployment names the database the service writes its orders to: the
// processes on one database share the async mode's queue, and those on
// another (tests sharing one Redis) do not. An in-memory SQLite is this
// process's alone.
func deployment(cfg Config) string {
	var id string
	switch {
	case cfg.MySQLDSN != "":
		if c, err := mysqldrv.ParseDSN(cfg.MySQLDSN); err == nil {
			id = "mysql:" + c.Addr + "/" + c.DBName
		} else {
			id = "mysql:" + cfg.MySQLDSN
		}
	case cfg.SQLitePath != "":
		abs, err := filepath.Abs(cfg.SQLitePath)
		if err != nil {
			abs = cfg.SQLitePath
		}
		id = "sqlite:" + abs
	default:
		id = "memory:" + rand.Text()
	}
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:6])
}
