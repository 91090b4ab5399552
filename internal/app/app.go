package app

import (
	"cmp"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/plugin/opentelemetry/tracing"

	"seckill/internal/admission"
	"seckill/internal/api"
	"seckill/internal/catalogue"
	"seckill/internal/connlimit"
	"seckill/internal/embedded"
	"seckill/internal/gate"
	"seckill/internal/idgen"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/outbox"
	"seckill/internal/reconcile"
	"seckill/internal/server"
	"seckill/internal/session"
	"seckill/internal/stock"
	"seckill/internal/telemetry"
)

// App is the assembled service: its backends, the order service and the
// HTTP handler.
type App struct {
	Config   Config
	Embedded bool // Redis or the database is the embedded stand-in
	Orders   *order.Service
	// Reconciler settles what purchases left unsettled, audits and repairs
	// the sales of Orders.
	Reconciler *reconcile.Reconciler
	Consumer   *outbox.Consumer // nil when Config.Consume is off
	// MQConsumer writes the mq mode's orders; nil without a broker or
	// when Config.Consume is off.
	MQConsumer *outbox.Consumer
	Handler    *server.Server

	rdb    redis.UniversalClient // a *redis.Client, or a *redis.ClusterClient with Config.RedisCluster
	broker *outbox.Broker
	gate   *gate.Notifier
	locks  *lock.Pool
	ids    *idgen.Segments
	// paths, captchas and perAddress are shared by the service and the handler.
	paths      *admission.Paths
	captchas   *admission.Captchas
	perAddress *admission.PerAddress
	db         *gorm.DB
	closeDB    func() error
	embedded   *embedded.Redis
	limit      *admission.Gradient // nil when Config.ConcurrencyLimit is 0
	etcd       *etcdConn
	redisVer   string
	sqlVer     string
	tokenNote  string // the serving line's word on the operator token (operator)
	log        *slog.Logger
}

// Extras are optional parts supplied by the caller.
type Extras struct {
	Web  fs.FS       // the page served at /
	Runs server.Runs // the lab's load runs
}

// Open connects to the backends named by cfg, starting embedded ones for
// those it does not name, migrates the tables and builds the service. On
// error everything opened so far is closed again.
func Open(ctx context.Context, cfg Config, log *slog.Logger, extras Extras) (_ *App, err error) {
	if log == nil {
		log = slog.Default()
	}
	a := &App{Config: cfg, log: log}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	connected := new(onConnect)
	if err = a.openBackends(ctx, connected); err != nil {
		return nil, err
	}
	if err = a.instrument(); err != nil {
		return nil, err
	}
	if err = a.startOrders(ctx, connected); err != nil {
		return nil, err
	}
	token, err := a.operator(ctx)
	if err != nil {
		return nil, err
	}
	desk, err := a.sessions(ctx)
	if err != nil {
		return nil, err
	}
	rpID, rpOrigins := cfg.RelyingParty()
	passkeys, err := session.NewPasskeys(session.PasskeyOptions{RPID: rpID, Origins: rpOrigins, Desk: desk, DB: a.db, Redis: a.rdb})
	if err != nil {
		return nil, err
	}
	a.redisVer = redisVersion(ctx, a.rdb, a.embedded != nil)
	a.sqlVer = sqlVersion(ctx, a.db)
	deps := server.Deps{
		Orders: a.Orders, Reads: a.Orders.Reads(), Payments: a.Orders.Lifecycle(), Catalogue: a.Orders.Catalogue(), Door: a.Orders.Door(),
		Queue: a.Orders.Queue(), Auditor: a.Reconciler,
		Health: a.health, AdminToken: token, AllowedOrigins: cfg.AllowedOrigins,
		AllowedHosts: cfg.AllowedHosts, ListenAddr: cfg.Addr, Web: extras.Web, Runs: extras.Runs, Log: log,
		Captchas: a.captchas, PerAddress: a.perAddress,
		TrustedProxies: cfg.TrustedProxies,
		Sessions:       desk,
		Passkeys:       passkeys, PasskeyOrigins: rpOrigins,
		Signups: session.NewSignups(a.rdb, session.SignupOptions{PerAddress: orOff(cfg.SignupsAddress),
			PerNetwork: orOff(cfg.SignupsNetwork), NoCaptcha: orOff(cfg.SignupsCaptcha)}),
		Trace: telemetry.On(),
	}
	if a.gate != nil { // not a nil *gate.Notifier in the interface
		deps.Gate = a.gate
	}
	if a.limit != nil {
		deps.Admission = a.limit
	}
	deps.Consumers = map[string]server.ConsumerStats{}
	if a.Consumer != nil {
		deps.Consumers["streams"] = a.Consumer
	}
	if a.MQConsumer != nil {
		deps.Consumers["rabbitmq"] = a.MQConsumer
	}
	a.Handler = server.New(deps)
	return a, nil
}

// openBackends connects to Redis, the database, the lock servers, the
// broker and the gate, and migrates the tables.
func (a *App) openBackends(ctx context.Context, connected *onConnect) (err error) {
	cfg := a.Config
	if a.rdb, err = a.openRedis(ctx, connected); err != nil {
		return err
	}
	if a.db, a.closeDB, err = openSQL(ctx, cfg.MySQLDSN, cfg.SQLitePath); err != nil {
		return err
	}
	a.Embedded = a.Embedded || cfg.MySQLDSN == ""
	a.etcd = &etcdConn{endpoints: cfg.EtcdEndpoints}
	pc := lock.PoolConfig{Redis: a.rdb, NodeAddrs: cfg.RedisAddrs, Etcd: a.etcd.connect}
	if cfg.MySQLDSN != "" {
		pc.MySQLDSN = mysqlDSN(cfg.MySQLDSN)
	}
	if a.locks, err = lock.OpenPool(ctx, pc); err != nil {
		return err
	}
	if err = order.Migrate(ctx, a.db); err != nil {
		return err
	}
	if err = session.Migrate(ctx, a.db); err != nil {
		return err
	}
	if err = migrateSecrets(ctx, a.db); err != nil {
		return err
	}
	if cfg.RabbitMQURL != "" {
		if a.broker, err = outbox.Dial(cfg.RabbitMQURL, MQQueue(cfg)); err != nil {
			return err
		}
	}
	if len(cfg.GateURLs) > 0 {
		a.gate, err = gate.New(gate.Options{URLs: cfg.GateURLs, Secret: cfg.GateSecret, Log: a.log})
	}
	return err
}

// instrument traces the Redis commands and the SQL statements when tracing
// is on (telemetry.Setup found an exporter); off, it installs nothing.
func (a *App) instrument() error {
	if !telemetry.On() {
		return nil
	}
	// Within a purchase's or a batch's trace only: the background loops'
	// commands would each be a trace of their own.
	if err := redisotel.InstrumentTracing(a.rdb, redisotel.WithTracerProvider(telemetry.ChildrenOnly())); err != nil {
		return fmt.Errorf("tracing Redis: %w", err)
	}
	// Statements without their values: a span shows the shape, not the buyers.
	if err := a.db.Use(tracing.NewPlugin(tracing.WithTracerProvider(telemetry.ChildrenOnly()),
		tracing.WithoutMetrics(), tracing.WithoutQueryVariables())); err != nil {
		return fmt.Errorf("tracing SQL: %w", err)
	}
	return nil
}

// startOrders starts the order service, its consumers and the demo product.
func (a *App) startOrders(ctx context.Context, connected *onConnect) (err error) {
	cfg, log := a.Config, a.log
	var stockBack func(int64)
	if a.gate != nil {
		stockBack = a.gate.StockBack
	}
	// The order ids, the stock, the rate limit and the leases' lock are
	// built here and handed in: the service owns none of them. The ids
	// are segments reserved in SQL and drawn in memory: no purchase
	// touches a Redis key for its id.
	a.ids = idgen.NewSegments(&idgen.SQLBlocks{DB: a.db}, "order")
	lease, err := a.locks.Get("token")
	if err != nil {
		return err
	}
	st := stock.NewStore(a.rdb, a.db).ForDeployment(deployment(cfg))
	// The reconciler is built first: the service asks it for repairs; it
	// starts on the service once that exists.
	a.Reconciler, err = reconcile.New(reconcile.Options{
		DB: a.db, Redis: a.rdb, Stock: st, Lease: lease, Every: reconcileEvery(cfg.ReconcileEvery), Grace: cfg.ReconcileGrace,
		LockTTL: cfg.LockTTL, Step: redisStep, Broker: a.broker, Log: log,
	})
	if err != nil {
		return err
	}
	connected.rec.Store(a.Reconciler)
	a.paths, a.captchas = admission.NewPaths(a.rdb, cfg.PathTTL), admission.NewCaptchas(a.rdb, admission.CaptchaOptions{})
	a.perAddress = admission.NewPerAddress(a.rdb, cfg.AddressRate, time.Second)
	var limit order.Limiter // not a nil *admission.Gradient in the interface
	if cfg.ConcurrencyLimit > 0 {
		a.limit = admission.NewGradient(admission.GradientOptions{Max: cfg.ConcurrencyLimit})
		limit = a.limit
	}
	a.Orders, err = order.NewService(a.db, a.rdb, a.locks, order.Options{
		LockTTL: cfg.LockTTL, LockWait: cfg.LockWait, Admit: admission.NewPerBuyer(a.rdb, cfg.RateLimit), Step: redisStep,
		ReconcileEvery: reconcileEvery(cfg.ReconcileEvery), Repairs: a.Reconciler, Paths: a.paths, Captchas: a.captchas, PerAddress: a.perAddress,
		IDs: a.ids, Stock: st, Lease: lease, Broker: a.broker, StockBack: stockBack, Log: log,
		Limit: limit,
	})
	if err != nil {
		return err
	}
	a.Reconciler.Start(a.Orders)
	connected.svc.Store(a.Orders)
	// What a 202 survives, said once at start; the service reads it again
	// when it may have changed (catalogue.Catalogue.Durability).
	d := a.Orders.Catalogue().Durability(ctx)
	log.Info("what Redis keeps of an answered write", "durability", d.Level, "reason", d.Reason)
	if cfg.Consume {
		a.Consumer = order.NewConsumer(a.db, a.Orders, outbox.Options{ClaimIdle: cfg.ClaimIdle, Log: log})
		a.Consumer.Start()
		if a.broker != nil {
			a.MQConsumer = order.NewMQConsumer(a.db, a.Orders, a.broker, outbox.Options{Log: log})
			a.MQConsumer.Start()
		}
	}
	if cfg.DemoStock > 0 {
		return a.ensureDemo(ctx)
	}
	return nil
}

// sessions builds the buyers' sign-in desk on the shared signing key.
func (a *App) sessions(ctx context.Context) (*session.Desk, error) {
	secret, err := sessionSecret(ctx, a.db, a.rdb, a.Config.SessionSecret)
	if err != nil {
		return nil, err
	}
	keys, err := session.NewKeys(session.Options{Secret: secret, Lifetime: a.Config.SessionLifetime})
	if err != nil {
		return nil, err
	}
	return session.NewDesk(session.DeskOptions{Keys: keys, Accounts: session.NewAccounts(a.db), Redis: a.rdb, Demo: a.Config.Demo()}), nil
}

// orOff maps the configuration's "0 is no limit" to the sign-up limits'
// (where 0 is the default and below 0 none).
func orOff(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// openRedis connects to the cluster or the Redis cfg names, or starts an
// embedded one; connected is the hook on each new connection (to every
// node, on a cluster).
func (a *App) openRedis(ctx context.Context, connected *onConnect) (redis.UniversalClient, error) {
	if len(a.Config.RedisCluster) > 0 {
		cc, err := openCluster(ctx, a.Config.RedisCluster, connected)
		if err != nil {
			return nil, err // not a typed nil in the interface, which Close would call
		}
		return cc, nil
	}
	addr := a.Config.RedisAddr
	if addr == "" {
		var err error
		if a.embedded, err = embedded.StartRedis(); err != nil {
			return nil, err
		}
		addr = a.embedded.Addr()
		a.Embedded = true
	}
	rdb, err := openRedis(ctx, addr, connected)
	if err != nil {
		return nil, err
	}
	return rdb, nil
}

// reconcileEvery maps the configuration's "0 turns it off" to the order
// service's (which takes 0 for its default).
func reconcileEvery(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// DemoProduct is the product created at start when DemoStock > 0.
const DemoProduct = 1

// ensureDemo creates the demo product unless it exists, in the database or
// in Redis: a restart, or a second instance on a fresh database, must not
// lay out again the stock of a sale in progress.
func (a *App) ensureDemo(ctx context.Context) error {
	_, err := a.Orders.Catalogue().CreateIfAbsent(ctx, catalogue.ProductSpec{ID: DemoProduct, Name: "demo phone", Stock: a.Config.DemoStock})
	if errors.Is(err, catalogue.ErrExists) {
		a.log.Info("the demo product exists; left as it is", "reason", err)
		return nil
	}
	return err
}

// RedisAddr is the address of the Redis the service uses; the embedded one
// is a real server on loopback, so other processes may share it. On a
// cluster it is the comma-separated list of the nodes configured.
func (a *App) RedisAddr() string {
	if a.embedded != nil {
		return a.embedded.Addr()
	}
	if len(a.Config.RedisCluster) > 0 {
		return strings.Join(a.Config.RedisCluster, ",")
	}
	return a.Config.RedisAddr
}

// DB is the service's database handle, for tests and tools that inspect it.
func (a *App) DB() *gorm.DB { return a.db }

// Redis is the service's Redis client: a *redis.ClusterClient on a cluster.
func (a *App) Redis() redis.UniversalClient { return a.rdb }

// Mode says whether the service runs on embedded stand-ins.
func (a *App) Mode() string {
	if a.Embedded {
		return "embedded"
	}
	return "external"
}

func (a *App) health(ctx context.Context) (api.Health, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := a.rdb.Ping(ctx).Err(); err != nil {
		return api.Health{}, fmt.Errorf("%w: %w", server.ErrRedisDown, err)
	}
	sqlDB, err := a.db.DB()
	if err == nil {
		err = sqlDB.PingContext(ctx)
	}
	if err != nil {
		return api.Health{}, fmt.Errorf("%w: %w", server.ErrDatabaseDown, err)
	}
	q, err := a.Orders.Queue().Backlog(ctx)
	if err != nil {
		return api.Health{}, fmt.Errorf("%w: %w", server.ErrRedisDown, err)
	}
	return api.Health{Status: "ok", Mode: a.Mode(), Redis: a.redisVer, SQL: a.sqlVer, Queue: server.BacklogBody(q)}, nil
}

// Close closes the service, then Redis and the database, then the
// embedded server.
func (a *App) Close() error {
	var errs []error
	if a.Consumer != nil {
		errs = append(errs, a.Consumer.Close())
	}
	if a.MQConsumer != nil {
		errs = append(errs, a.MQConsumer.Close())
	}
	if a.Reconciler != nil { // its schedules first: their passes are the service's work
		errs = append(errs, a.Reconciler.Close())
	}
	if a.Orders != nil {
		errs = append(errs, a.Orders.Close())
	}
	if a.ids != nil { // after the service: its purchases draw ids until it closed
		a.ids.Close()
	}
	if a.gate != nil { // after the service: its last notices are sent
		errs = append(errs, a.gate.Close())
	}
	if a.locks != nil {
		if err := a.locks.Close(); !closedByPeer(err) {
			errs = append(errs, err)
		}
	}
	if a.etcd != nil {
		errs = append(errs, a.etcd.Close())
	}
	if a.broker != nil {
		errs = append(errs, a.broker.Close())
	}
	if a.rdb != nil {
		errs = append(errs, a.rdb.Close())
	}
	if a.closeDB != nil {
		// An idle connection the server (or the network) already closed
		// fails its goodbye with ErrBadConn: nothing is left undone.
		if err := a.closeDB(); !closedByPeer(err) {
			errs = append(errs, err)
		}
	}
	if a.embedded != nil {
		a.embedded.Close()
	}
	return errors.Join(errs...)
}

// MQQueue names the mq mode's queue: one per deployment (the database the
// orders go to), so that the consumers of processes on another database
// sharing the broker leave these orders alone.
func MQQueue(cfg Config) string { return "seckill.orders." + deployment(cfg) }

// Broker is the mq mode's broker, nil without one.
func (a *App) Broker() *outbox.Broker { return a.broker }

// Server is an App serving HTTP.
type Server struct {
	*App
	URL  string
	runs server.Runs
	http *http.Server
	done chan struct{} // closed when Serve returns
	err  error         // what Serve returned
}

// Start opens the App and serves it on cfg.Addr (port 0 picks a free one).
func Start(ctx context.Context, cfg Config, log *slog.Logger, extras Extras) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", cfg.Addr, err)
	}
	// Port 0 picked one: the passkeys' default origin names it.
	if host, port, err := net.SplitHostPort(cfg.Addr); err == nil && port == "0" {
		_, picked, _ := net.SplitHostPort(ln.Addr().String())
		cfg.Addr = net.JoinHostPort(host, picked)
	}
	a, err := Open(ctx, cfg, log, extras)
	if err != nil {
		ln.Close()
		return nil, err
	}
	capped := connlimit.NewListener(ln, connlimit.Options{
		PerAddress: cfg.AddressConns, Total: cfg.MaxConns, Exempt: trusted(cfg.TrustedProxies),
	})
	s := &Server{
		App:  a,
		runs: extras.Runs,
		URL:  "http://" + ln.Addr().String(),
		http: &http.Server{
			Handler: a.Handler,
			// A Config built in code may leave them 0: the defaults, never none.
			ReadHeaderTimeout: cmp.Or(cfg.HeaderTimeout, DefaultHeaderTimeout),
			ReadTimeout:       10 * time.Second,
			// A purchase runs to its end even if the client hangs up, within
			// its budget; the response must be allowed to outlast it.
			WriteTimeout:   a.Orders.Budget().Purchase() + 5*time.Second,
			IdleTimeout:    cmp.Or(cfg.IdleTimeout, DefaultIdleTimeout),
			MaxHeaderBytes: server.MaxHeaderBytes,
			ConnState:      capped.ConnState,
			ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		s.err = s.http.Serve(capped)
	}()
	return s, nil
}

// trusted reports the addresses of the trusted proxies (addresses or CIDRs,
// checked by ParseConfig), which the per-address connection cap leaves
// alone: each carries many clients.
func trusted(proxies []string) func(netip.Addr) bool {
	var nets []netip.Prefix
	for _, p := range proxies {
		if pfx, err := netip.ParsePrefix(p); err == nil {
			nets = append(nets, pfx.Masked())
		} else if a, err := netip.ParseAddr(p); err == nil {
			nets = append(nets, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		}
	}
	return func(a netip.Addr) bool {
		for _, n := range nets {
			if n.Contains(a) {
				return true
			}
		}
		return false
	}
}

// Shutdown stops accepting requests, lets in-flight ones finish until ctx
// ends, then closes the service and its backends.
func (s *Server) Shutdown(ctx context.Context) error {
	// A lab run is a long job sending requests through this very server:
	// cancel it first, or Shutdown would wait for it.
	var errs []error
	if s.runs != nil {
		errs = append(errs, s.runs.Close())
	}
	err := errors.Join(append(errs, s.http.Shutdown(ctx))...)
	<-s.done
	if !errors.Is(s.err, http.ErrServerClosed) {
		err = errors.Join(err, s.err)
	}
	return errors.Join(err, s.App.Close())
}

// Done is closed when the server stops serving, by Shutdown or by itself;
// Err then tells why.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err is what ended serving, once Done is closed.
func (s *Server) Err() error { return s.err }

// closedByPeer reports an error of closing a database connection that the
// server (or the network) had closed already: nothing is left undone. The
// MySQL driver's own such error is unexported ("bad connection").
func closedByPeer(err error) bool {
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysqldrv.ErrInvalidConn) ||
		err != nil && err.Error() == "bad connection"
}
