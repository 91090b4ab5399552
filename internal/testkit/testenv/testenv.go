// Package testenv gives tests the service's backends: the real Redis and
// MySQL named by REDIS_ADDR and MYSQL_DSN when they are set (as in CI), each
// test with a database of its own, or else the embedded stand-ins, so that
// the same tests run on a machine with nothing but Go.
package testenv

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/glebarez/sqlite"
	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"seckill/internal/app"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/outbox"
	"seckill/internal/reconcile"
	"seckill/internal/stock"
	"seckill/internal/testkit"
)

// AdminToken is the operator token of the services Config configures:
// tests send it where the operator would.
const AdminToken = "test-operator-token"

// Config returns a service configuration for a test: loopback on a free
// port, no rate limit, no demo product, short lock waits, the operator
// token AdminToken, and the real servers when the environment names them.
// It logs which it uses.
func Config(t testing.TB) app.Config {
	t.Helper()
	cfg := app.Config{
		Addr:            "127.0.0.1:0",
		AdminToken:      AdminToken,
		LockTTL:         5 * time.Second,
		LockWait:        5 * time.Second,
		ShutdownTimeout: 5 * time.Second,
		LogLevel:        "warn",
		Consume:         true,
		// The tests sign their buyers in by name (SignIn) on the real
		// servers too.
		DemoAccounts: "true",
	}
	cfg.RedisAddr = os.Getenv("REDIS_ADDR")
	if eps := os.Getenv("ETCD_ENDPOINTS"); eps != "" {
		cfg.EtcdEndpoints = strings.Split(eps, ",")
	}
	if dsn := os.Getenv("MYSQL_DSN"); dsn != "" {
		cfg.MySQLDSN = Database(t, dsn)
	}
	t.Logf("backends: redis=%s sql=%s", orEmbedded(cfg.RedisAddr), orEmbedded(redactDSN(cfg.MySQLDSN)))
	return cfg
}

// RequireReal skips the test unless REDIS_ADDR and MYSQL_DSN are set: for
// the claims that must hold on the real servers.
func RequireReal(t testing.TB) {
	t.Helper()
	for _, name := range []string{"REDIS_ADDR", "MYSQL_DSN"} {
		if os.Getenv(name) == "" {
			testkit.Skipf(t, name, "%s is not set: this test needs the real server", name)
		}
	}
}

func orEmbedded(s string) string {
	if s == "" {
		return "embedded"
	}
	return s
}

func redactDSN(dsn string) string {
	if c, err := mysql.ParseDSN(dsn); err == nil && c.Passwd != "" {
		c.Passwd = "****"
		return c.FormatDSN()
	}
	return dsn
}

var unsafeName = regexp.MustCompile(`[^a-z0-9_]+`)

// Database creates a database of the test's own on the server of dsn and
// returns a DSN for it; the database is dropped when the test ends.
func Database(t testing.TB, dsn string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("MYSQL_DSN: %v", err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("opening MySQL: %v", err)
	}
	t.Cleanup(func() { admin.Close() })
	name := strings.Trim(unsafeName.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	name = fmt.Sprintf("seckill_%.30s_%s", name, randomHex(4))
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatalf("creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE `"+name+"`"); err != nil {
			t.Errorf("dropping database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	cfg.ParseTime = true
	return cfg.FormatDSN()
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ProductID returns a product id no other test uses, so that tests sharing
// one Redis do not meet.
func ProductID(t testing.TB) int64 {
	n, err := rand.Int(rand.Reader, big.NewInt(1<<40))
	if err != nil {
		t.Fatal(err)
	}
	return 1_000_000 + n.Int64()
}

// Start starts the service with cfg and extras, and shuts it down when the
// test ends (Shutdown also closes a lab that extras carry).
func Start(t testing.TB, cfg app.Config, extras app.Extras) *app.Server {
	t.Helper()
	// The service's log goes to the test's output: shown on failure or -v.
	level := slog.LevelWarn
	if cfg.LogLevel != "" {
		if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
			t.Fatalf("log level %q: %v", cfg.LogLevel, err)
		}
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
	srv, err := app.Start(context.Background(), cfg, log, extras)
	if err != nil {
		t.Fatalf("starting the service: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutting the service down: %v", err)
		}
	})
	return srv
}

// DeleteQueueAfter deletes the mq mode's queue of cfg (its deployment's)
// when the test ends. Registered before Start, it runs once the service is
// down (cleanups run last first), so that its consumer never finds the
// queue gone.
func DeleteQueueAfter(t testing.TB, cfg app.Config) {
	t.Helper()
	t.Cleanup(func() {
		b, err := outbox.Dial(cfg.RabbitMQURL, app.MQQueue(cfg))
		if err == nil {
			err = errors.Join(b.Delete(), b.Close())
		}
		if err != nil {
			t.Errorf("deleting the test's queue: %v", err)
		}
	})
}

// DropProductKeys deletes the Redis keys of the products from the Redis at
// addr, so that tests sharing a real Redis leave nothing behind.
func DropProductKeys(t testing.TB, addr string, ids ...int64) {
	t.Helper()
	// A cluster's nodes, comma-separated (app.App.RedisAddr), or one Redis.
	var rdb redis.UniversalClient = redis.NewClient(&redis.Options{Addr: addr})
	if nodes := strings.Split(addr, ","); len(nodes) > 1 {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: nodes})
	}
	defer rdb.Close()
	var extra []string
	for _, id := range ids {
		extra = append(extra, reconcile.ProductKeys(id)...)
	}
	if err := stock.Purge(context.Background(), rdb, ids, extra...); err != nil {
		t.Errorf("deleting the keys of products %v: %v", ids, err)
	}
}

// Local returns a miniredis and an in-memory SQLite with the service's
// tables, closed when the test ends: for tests of the service's own logic,
// which does not depend on the real servers.
func Local(t testing.TB) (*redis.Client, *gorm.DB, *miniredis.Miniredis) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	db, err := gorm.Open(sqlite.Open(testkit.MemorySQLite(t)), &gorm.Config{Logger: logger.Discard, TranslateError: true})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.SetMaxOpenConns(1) // one writer at a time: a queue, not SQLITE_BUSY
	t.Cleanup(func() { sqlDB.Close() })
	if err := order.Migrate(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	return rdb, db, mr
}

// Orders is an order service and its reconciler on db and rdb, wired as
// app wires them: one stock store, the token lock for the leases, the
// reconciler as the service's Repairs; not on a connect hook, since these
// tests restart no Redis. Both close when the test ends. The reconciler's schedule is off
// unless ropt.Every says otherwise: the tests call Reconcile.
func Orders(t testing.TB, db *gorm.DB, rdb redis.UniversalClient, locks *lock.Pool, opt order.Options, ropt reconcile.Options) (*order.Service, *reconcile.Reconciler) {
	t.Helper()
	lease, err := locks.Get("token")
	if err != nil {
		t.Fatal(err)
	}
	if opt.Stock == nil {
		opt.Stock = stock.NewStore(rdb, db).ForDeployment(opt.Deployment)
	}
	if ropt.Every == 0 {
		ropt.Every = -1
	}
	ropt.DB, ropt.Redis, ropt.Stock, ropt.Lease = db, rdb, opt.Stock, lease
	ropt.LockTTL = cmp.Or(ropt.LockTTL, opt.LockTTL)
	ropt.Step = cmp.Or(ropt.Step, opt.Step)
	ropt.Broker = cmp.Or(ropt.Broker, opt.Broker)
	ropt.Log = cmp.Or(ropt.Log, opt.Log)
	rec, err := reconcile.New(ropt)
	if err != nil {
		t.Fatal(err)
	}
	opt.Repairs = rec
	svc, err := order.NewService(db, rdb, locks, opt)
	if err != nil {
		t.Fatal(err)
	}
	rec.Start(svc)
	t.Cleanup(func() {
		rec.Close()
		svc.Close()
	})
	return svc, rec
}
