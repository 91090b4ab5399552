package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"seckill/internal/app"
	"seckill/internal/embedded"
	"seckill/internal/freeport"
	"seckill/internal/lab/harness"
	"seckill/internal/testkit/child"
)

// cluster is the service instances a run drives: the first in this process,
// the others child processes sharing its Redis and database, and the Redis
// of their own when a scenario strikes it.
type cluster struct {
	URLs     []string
	first    *app.Server
	children []*child.Instance // instance k is children[k-1]
	redis    *child.Redis      // nil unless the scenario asked for one
	dbProxy  *child.Proxy      // between the instances and MYSQL_DSN's server, when a fault cuts it
	dropDB   func() error      // drops the database of the cluster's own, if it made one
	etcd     *embedded.Server  // the instances' shared etcd when none is named; nil else
	tmpDir   string

	exe    string   // this binary, which the children run
	args   []string // the children's service flags, -addr aside
	stderr io.Writer
	logs   io.Writer // the instances' logs (logsOf)
}

// serviceConfig is the service configuration for the instances the harness
// starts: the environment's backends (REDIS_ADDR, MYSQL_DSN, …), a free
// loopback port, no rate limits, no demo product, and token, when set, for
// the operator token.
func serviceConfig(getenv func(string) string, lockTTL, lockWait time.Duration, token string) (app.Config, error) {
	cfg, _, err := app.ParseConfig("service", nil, getenv)
	if err != nil {
		return cfg, fmt.Errorf("reading the service configuration from the environment: %w", err)
	}
	cfg.Addr = "127.0.0.1:0"
	cfg.RateLimit = 0
	cfg.AddressRate = 0  // every buyer of the harness is this one address
	cfg.AddressConns = 0 // and so are its thousands of connections
	cfg.DemoStock = 0
	cfg.LogLevel = "warn"
	if token != "" {
		cfg.AdminToken = token
	}
	if lockTTL > 0 {
		cfg.LockTTL = lockTTL
	}
	if lockWait > 0 {
		cfg.LockWait = lockWait
	}
	return cfg, nil
}

// startCluster starts k instances on cfg. They must share the stock and the
// orders, so on the embedded default the first instance's Redis (a real TCP
// server on loopback) and one SQLite file in a temporary directory serve all.
// With ownRedis, a Redis of the cluster's own in a process of its own serves
// them instead, whatever cfg names, so that it can be paused. The children
// are this binary re-executed (see child.Run); each exits when its stdin
// closes, so none outlives the harness even if it is killed.
func startCluster(ctx context.Context, k int, needs clusterNeeds, cfg app.Config, stderr io.Writer) (c *cluster, err error) {
	ownRedis, shared := needs.ownRedis, k+needs.spawned > 1
	c = &cluster{stderr: stderr, logs: logsOf(stderr)}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	if c.exe, err = os.Executable(); err != nil {
		return c, fmt.Errorf("finding the harness binary to start instances: %w", err)
	}
	if (shared && cfg.MySQLDSN == "" && cfg.SQLitePath == "") || ownRedis {
		if c.tmpDir, err = os.MkdirTemp("", "seckill-loadtest-"); err != nil {
			return c, fmt.Errorf("creating the cluster's directory: %w", err)
		}
	}
	if shared && cfg.MySQLDSN == "" && cfg.SQLitePath == "" {
		cfg.SQLitePath = filepath.Join(c.tmpDir, "seckill.db")
	}
	if ownRedis {
		if c.redis, err = child.StartRedis(ctx, c.exe, c.tmpDir, c.logs); err != nil {
			return c, err
		}
		cfg.RedisAddr = c.redis.Addr
		fmt.Fprintf(stderr, "a Redis of the run's own (%s) on %s\n", c.redis.Kind, c.redis.Addr)
	}
	if ownRedis && cfg.MySQLDSN != "" {
		// A Redis of its own draws order ids of its own: beside another
		// deployment's rows in one database they could collide.
		if cfg.MySQLDSN, err = c.ownDatabase(ctx, cfg.MySQLDSN); err != nil {
			return c, err
		}
	}
	if needs.cutDB && cfg.MySQLDSN != "" {
		if cfg.MySQLDSN, err = c.proxyDatabase(cfg.MySQLDSN); err != nil {
			return c, err
		}
	}
	if shared && len(cfg.EtcdEndpoints) == 0 {
		// Each instance would start an embedded etcd of its own, and the
		// etcd lock would exclude nothing across them: one, in this
		// process, serves all (never paused: faults strike the children).
		if c.etcd, err = embedded.StartSingle(); err != nil {
			return c, err
		}
		cfg.EtcdEndpoints = []string{c.etcd.Endpoint()}
	}
	log := slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if c.first, err = app.Start(ctx, cfg, log, app.Extras{}); err != nil {
		return c, fmt.Errorf("starting the service: %w", err)
	}
	c.URLs = append(c.URLs, c.first.URL)
	redis := []string{"-redis", c.first.RedisAddr()}
	if len(cfg.RedisCluster) > 0 {
		// -redis= clears a REDIS_ADDR the child inherits: both is refused.
		redis = []string{"-redis=", "-redis-cluster", c.first.RedisAddr()}
	}
	c.args = append(redis,
		"-mysql", cfg.MySQLDSN, "-sqlite", cfg.SQLitePath, "-admin-token", c.first.Config.AdminToken,
		"-rate-limit", "0", "-address-rate", "0", "-address-conns", "0", "-demo-stock", "0", "-lock-ttl", cfg.LockTTL.String(),
		"-lock-wait", cfg.LockWait.String(), "-reconcile-grace", cfg.ReconcileGrace.String(), "-claim-idle", cfg.ClaimIdle.String(), "-log-level", "warn",
	)
	if len(cfg.GateURLs) > 0 {
		c.args = append(c.args, "-gate", strings.Join(cfg.GateURLs, ","), "-gate-secret", cfg.GateSecret)
	}
	if len(cfg.EtcdEndpoints) > 0 {
		c.args = append(c.args, "-etcd-endpoints", strings.Join(cfg.EtcdEndpoints, ","))
	}
	for i := 1; i < k; i++ {
		// On a port of freeport's, not the kernel's: Heal binds it again.
		addr, err := freeport.Addr()
		if err != nil {
			return c, err
		}
		in, err := c.spawn(ctx, addr)
		if err != nil {
			return c, fmt.Errorf("starting instance %d: %w", i+1, err)
		}
		c.children = append(c.children, in)
		c.URLs = append(c.URLs, in.URL)
	}
	return c, nil
}

// spawn starts a child instance on addr, with extra flags after the
// cluster's.
func (c *cluster) spawn(ctx context.Context, addr string, extra ...string) (*child.Instance, error) {
	args := append([]string{"-addr", addr}, c.args...)
	return child.StartInstance(ctx, c.exe, append(args, extra...), c.logs)
}

// childGrace is how long a child may take to shut down before it is killed.
const childGrace = 10 * time.Second

// stop ends the children (stdin closed and SIGTERM, SIGKILL after a grace
// period), waits for each, then shuts the first instance down, then the
// cluster's Redis.
func (c *cluster) stop() error {
	var errs []error
	for _, in := range c.children {
		errs = append(errs, in.Stop(childGrace))
	}
	c.children = nil
	if c.first != nil {
		ctx, cancel := context.WithTimeout(context.Background(), childGrace)
		defer cancel()
		if err := c.first.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shutting the service down: %w", err))
		}
		c.first = nil
	}
	if c.redis != nil {
		errs = append(errs, c.redis.Stop(childGrace))
		c.redis = nil
	}
	if c.dbProxy != nil {
		errs = append(errs, c.dbProxy.Close())
		c.dbProxy = nil
	}
	if c.dropDB != nil {
		errs = append(errs, c.dropDB())
		c.dropDB = nil
	}
	if c.etcd != nil {
		errs = append(errs, c.etcd.Close())
		c.etcd = nil
	}
	if c.tmpDir != "" {
		if err := os.RemoveAll(c.tmpDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// The cluster strikes the scenarios' faults at the processes it started.
var _ harness.Injector = (*cluster)(nil)

// Check implements harness.Injector.
func (c *cluster) Check(f harness.Fault) error {
	switch f.Action {
	case harness.PauseRedis:
		if c.redis == nil {
			return errors.New("the run has no Redis of its own")
		}
		return nil
	case harness.KillRedis, harness.PersistRedis:
		switch {
		case c.redis == nil:
			return errors.New("the run has no Redis of its own")
		case f.Persistence != "" && f.Persistence != child.NoPersistence && c.redis.Kind != "redis-server":
			return fmt.Errorf("persistence %s needs redis-server on PATH (the embedded Redis keeps nothing)", f.Persistence)
		}
		return nil
	case harness.CutDatabase:
		if c.dbProxy == nil {
			return errors.New("the instances reach no database through a proxy of the run's (it needs MYSQL_DSN)")
		}
		return nil
	case harness.PauseInstance, harness.KillInstance, harness.KillConsumer:
		switch {
		case f.Instance == 0:
			return errors.New("instance 0 runs in the harness's own process")
		case f.Instance > len(c.children):
			return fmt.Errorf("the run has %d instances", len(c.children)+1)
		}
		return nil
	}
	return fmt.Errorf("no such fault %q", f.Action)
}

// Inject implements harness.Injector.
func (c *cluster) Inject(ctx context.Context, f harness.Fault) error {
	if err := c.Check(f); err != nil {
		return err
	}
	switch f.Action {
	case harness.PauseRedis:
		return c.redis.PauseFor(ctx, f.For)
	case harness.PauseInstance:
		return c.children[f.Instance-1].PauseFor(ctx, f.For)
	case harness.KillConsumer:
		return c.killConsumer(ctx, c.children[f.Instance-1])
	case harness.PersistRedis:
		return c.redis.SetPersistence(ctx, f.Persistence)
	case harness.KillRedis:
		if err := c.redis.Restart(ctx); err != nil {
			return fmt.Errorf("restarting the run's Redis after its kill: %w", err)
		}
		return nil
	case harness.CutDatabase:
		c.dbProxy.Cut()
		t := time.NewTimer(f.For)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		c.dbProxy.Restore()
		return nil
	default: // KillInstance
		c.children[f.Instance-1].Kill()
		return nil
	}
}

// claimBound bounds the wait for a dead consumer's orders to be claimed.
const claimBound = 30 * time.Second

// killConsumer kills in while its consumer holds orders, then waits until
// the living consumers have claimed them all: an error if they have not
// within claimBound.
func (c *cluster) killConsumer(ctx context.Context, in *child.Instance) error {
	ctx, cancel := context.WithTimeout(ctx, claimBound)
	defer cancel()
	orders := c.first.Orders
	dead, held, err := in.KillHolding(ctx, orders.Queue().DeliveredTo)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "killed instance's consumer %s holding %d orders\n", dead, held)
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		now, err := orders.Queue().DeliveredTo(ctx)
		if err == nil && now[dead] == 0 {
			fmt.Fprintf(c.stderr, "its orders were claimed %s after the kill\n", time.Since(start).Round(time.Millisecond))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the dead consumer %s still holds %d orders after %s (%v)", dead, now[dead], claimBound, err)
		case <-tick.C:
		}
	}
}

// Heal implements harness.Injector: it starts again, on their addresses,
// the instances a fault killed.
func (c *cluster) Heal(ctx context.Context) error {
	for i, in := range c.children {
		select {
		case <-in.Exited():
		default:
			continue
		}
		u, err := url.Parse(in.URL)
		if err != nil {
			return err
		}
		again, err := c.spawn(ctx, u.Host)
		if err != nil {
			return fmt.Errorf("restarting instance %d: %w", i+1, err)
		}
		c.children[i] = again
	}
	return nil
}

// clusterNeeds are what a scenario's faults need of the cluster.
type clusterNeeds struct {
	// ownRedis: a Redis of the cluster's own (see startCluster).
	ownRedis bool
	// cutDB: the instances reach MYSQL_DSN's server through a proxy of
	// the cluster's, which a fault cuts; the server itself is untouched.
	cutDB bool
	// spawned counts the children the caller starts itself, with flags of
	// their own (c.spawn): they share the Redis and the database as the k
	// instances do.
	spawned int
}

// proxyDatabase starts a proxy to dsn's server and returns dsn through it.
func (c *cluster) proxyDatabase(dsn string) (string, error) {
	d, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("reading MYSQL_DSN to put a proxy in front of it: %w", err)
	}
	if c.dbProxy, err = child.StartProxy(d.Addr); err != nil {
		return "", err
	}
	d.Addr = c.dbProxy.Addr()
	fmt.Fprintf(c.stderr, "the instances reach the database through a proxy of the run's on %s\n", d.Addr)
	return d.FormatDSN(), nil
}

// ownDatabase creates a database of the cluster's own on dsn's server,
// dropped by stop, and returns its DSN.
func (c *cluster) ownDatabase(ctx context.Context, dsn string) (string, error) {
	d, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("reading MYSQL_DSN: %w", err)
	}
	server := d.Clone()
	server.DBName = ""
	db, err := sql.Open("mysql", server.FormatDSN())
	if err != nil {
		return "", err
	}
	name := "seckill_loadtest_" + strings.ToLower(rand.Text()[:10])
	if _, err := db.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		db.Close()
		return "", fmt.Errorf("creating the run's database %s: %w", name, err)
	}
	c.dropDB = func() error {
		defer db.Close()
		if _, err := db.Exec("DROP DATABASE `" + name + "`"); err != nil {
			return fmt.Errorf("dropping the run's database %s: %w", name, err)
		}
		return nil
	}
	fmt.Fprintf(c.stderr, "a database of the run's own: %s\n", name)
	d.DBName = name
	return d.FormatDSN(), nil
}
