// Package app assembles the service from its configuration: it connects to
// Redis and the database (or starts embedded stand-ins when none is named),
// builds the order service and its HTTP handler, and closes them in order.
// cmd/seckill and the load harness both start the service through it.
package app

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"seckill/internal/api"
	"seckill/internal/outbox"
	"seckill/internal/session"
	"seckill/internal/telemetry"
)

// Config is every knob of the service. Each is a flag with an environment
// twin; the flag wins when both are set.
type Config struct {
	Addr            string        // -addr / HTTP_ADDR
	RedisAddr       string        // -redis / REDIS_ADDR; empty starts an embedded Redis
	RedisAddrs      []string      // -redis-nodes / REDIS_ADDRS; independent nodes for redlock
	RedisCluster    []string      // -redis-cluster / REDIS_CLUSTER; nodes of a Redis Cluster, instead of -redis
	EtcdEndpoints   []string      // -etcd-endpoints / ETCD_ENDPOINTS; the etcd lock's cluster, empty for an embedded one
	MySQLDSN        string        // -mysql / MYSQL_DSN; empty uses an embedded SQLite
	SQLitePath      string        // -sqlite / SQLITE_PATH; the embedded store's file, "" for memory
	RateLimit       time.Duration // -rate-limit / RATE_LIMIT; one order request per user and product per period, 0 off
	LockTTL         time.Duration // -lock-ttl / LOCK_TTL
	LockWait        time.Duration // -lock-wait / LOCK_WAIT
	DemoStock       int           // -demo-stock / DEMO_STOCK; stock of the demo product created at start, 0 none
	AdminToken      string        // -admin-token / ADMIN_TOKEN; the operator token; empty: made at start and kept in SQL
	DataDir         string        // -data-dir / DATA_DIR; where the embedded default keeps its operator token; empty: nowhere
	LabTarget       string        // -lab-target / LAB_TARGET; where lab runs send their orders, "" for this process
	AllowedOrigins  []string      // -allowed-origins / ALLOWED_ORIGINS; origins beside the service's own that may send state-changing requests
	AllowedHosts    []string      // -allowed-hosts / ALLOWED_HOSTS; names beside IP addresses and localhost that requests may carry as their Host
	RabbitMQURL     string        // -rabbitmq-url / RABBITMQ_URL; the mq mode's broker, "" for none
	Consume         bool          // -consume / CONSUME; run a consumer of the async mode's queue (and the mq mode's) in this process
	ClaimIdle       time.Duration // -claim-idle / CLAIM_IDLE; how long a queued order may stay with a silent consumer before another claims it
	ReconcileEvery  time.Duration // -reconcile-every / RECONCILE_EVERY; 0 turns the schedule off
	ReconcileGrace  time.Duration // -reconcile-grace / RECONCILE_GRACE; 0 is a purchase's whole time budget
	SessionSecret   string        // -session-secret / SESSION_SECRET; signs buyers' tokens; empty: made at start and kept in SQL
	SessionLifetime time.Duration // -session-lifetime / SESSION_LIFETIME; how long a buyer's token is good for
	RPID            string        // -rp-id / RP_ID; the passkeys' relying party id, "" for the listen address's name or localhost
	RPOrigins       []string      // -rp-origins / RP_ORIGINS; the origins of the pages that use passkeys, empty for http://<rp id>:<listen port>
	DemoAccounts    string        // -demo-accounts / DEMO_ACCOUNTS; the sign-in by name alone: true, false, or auto (on when Redis and the database are both embedded)
	SignupsAddress  int           // -signups-per-address / SIGNUPS_PER_ADDRESS; accounts one address may make per hour, 0 no limit
	SignupsNetwork  int           // -signups-per-network / SIGNUPS_PER_NETWORK; accounts one IPv4 /24 or IPv6 /64 may make per hour, 0 no limit
	SignupsCaptcha  int           // -signups-before-captcha / SIGNUPS_BEFORE_CAPTCHA; accounts a network makes per hour before each further one needs a captcha, 0 never
	GateURLs        []string      // -gate / GATE_URLS; control URLs of the sold-out gates in front, told when a product has stock again
	GateSecret      string        // -gate-secret / GATE_SECRET; the gates' control secret
	ShutdownTimeout time.Duration // -shutdown-timeout / SHUTDOWN_TIMEOUT
	LogLevel        string        // -log-level / LOG_LEVEL
	Verbose         bool          // -v / VERBOSE; the full configuration in the start-up log
	AddressRate     int           // -address-rate / ADDRESS_RATE; the public's requests per second per client address, 0 off
	TrustedProxies  []string      // -trusted-proxies / TRUSTED_PROXIES; proxies whose X-Forwarded-For names the client
	PathTTL         time.Duration // -path-ttl / PATH_TTL; how long a purchase path token stays valid
	HeaderTimeout   time.Duration // -header-timeout / HEADER_TIMEOUT; how long a connection may take to send a request's headers
	IdleTimeout     time.Duration // -idle-timeout / IDLE_TIMEOUT; how long a keep-alive connection may wait for its next request
	AddressConns    int           // -address-conns / ADDRESS_CONNS; the most connections one peer address may hold open, 0 no cap
	MaxConns        int           // -max-conns / MAX_CONNS; the most connections open in all, 0 no cap

	// ConcurrencyLimit is -concurrency-limit / CONCURRENCY_LIMIT: the most
	// purchases the adaptive limit may let in at once, 0 off.
	ConcurrencyLimit int
}

// setting is one knob: its flag, its environment twin and its help.
type setting struct {
	flag, env, help string
	bind            func(fs *flag.FlagSet, name, def, help string)
	def             string
}

func (c *Config) settings(getenv func(string) string) []setting {
	str := func(p *string) func(*flag.FlagSet, string, string, string) {
		return func(fs *flag.FlagSet, name, def, help string) { fs.StringVar(p, name, def, help) }
	}
	list := func(p *[]string) func(*flag.FlagSet, string, string, string) {
		return func(fs *flag.FlagSet, name, def, help string) {
			fs.Func(name, help, func(s string) error { *p = splitList(s); return nil })
		}
	}
	num := func(p *int) func(*flag.FlagSet, string, string, string) {
		return func(fs *flag.FlagSet, name, def, help string) {
			n, _ := strconv.Atoi(def)
			fs.IntVar(p, name, n, help)
		}
	}
	dur := func(p *time.Duration) func(*flag.FlagSet, string, string, string) {
		return func(fs *flag.FlagSet, name, def, help string) {
			fs.Func(name, help+" (default "+def+")", func(s string) error {
				d, err := time.ParseDuration(s)
				if err != nil {
					return err
				}
				if d < 0 {
					return fmt.Errorf("must not be negative")
				}
				*p = d
				return nil
			})
			*p, _ = time.ParseDuration(def)
		}
	}
	return []setting{
		{"addr", "HTTP_ADDR", "listen address (loopback unless you ask otherwise)", str(&c.Addr), "127.0.0.1:8080"},
		{"redis", "REDIS_ADDR", "Redis host:port; empty starts an embedded Redis", str(&c.RedisAddr), ""},
		{"redis-cluster", "REDIS_CLUSTER", "comma-separated nodes (host:port) of a Redis Cluster to keep the stock on, instead of -redis", list(&c.RedisCluster), ""},
		{"redis-nodes", "REDIS_ADDRS", "comma-separated independent Redis nodes for the redlock strategy", list(&c.RedisAddrs), ""},
		{"etcd-endpoints", "ETCD_ENDPOINTS", "comma-separated etcd client URLs for the etcd lock; empty starts an embedded etcd on the strategy's first use", list(&c.EtcdEndpoints), ""},
		{"mysql", "MYSQL_DSN", "MySQL DSN (user:pass@tcp(host:port)/db); empty uses an embedded SQLite", str(&c.MySQLDSN), ""},
		{"sqlite", "SQLITE_PATH", "file for the embedded SQLite store; empty keeps it in memory", str(&c.SQLitePath), ""},
		{"rate-limit", "RATE_LIMIT", "allow one order request per user and product per this period; 0 turns it off", dur(&c.RateLimit), "3s"},
		{"concurrency-limit", "CONCURRENCY_LIMIT", "the ceiling of the adaptive concurrency limit on purchases of products that are not lab products: beyond the limit of the moment, a purchase is answered 503 overloaded at once; 0 (the default, see docs/BENCHMARKS.md: in an opening herd on one machine it sheds purchases it could have sold) turns the limit off", num(&c.ConcurrencyLimit), "0"},
		{"lock-ttl", "LOCK_TTL", "lease of a distributed lock", dur(&c.LockTTL), "5s"},
		{"lock-wait", "LOCK_WAIT", "how long an order waits for a held lock before 503", dur(&c.LockWait), "3s"},
		{"demo-stock", "DEMO_STOCK", "stock of demo product 1 created at start if absent; 0 creates none", num(&c.DemoStock), "100"},
		{"admin-token", "ADMIN_TOKEN", "the operator token: creating, resetting and reconciling products and lab runs need the header Authorization: Bearer <token>; empty: the first instance on a database makes one, logs it and keeps it in the database for every instance, with a copy in Redis (key seckill:admin-token)", str(&c.AdminToken), ""},
		{"data-dir", "DATA_DIR", "where the embedded default (no -redis, -redis-cluster, -mysql or -sqlite: nothing else is on disk) keeps its operator token across restarts, in the file " + operatorTokenFile + " (mode 0600); empty: nowhere, a new token at each start", str(&c.DataDir), defaultDataDir(getenv)},
		{"lab-target", "LAB_TARGET", "base URL the page's lab runs send their orders to, e.g. a load balancer over several instances; empty: this process", str(&c.LabTarget), ""},
		{"allowed-origins", "ALLOWED_ORIGINS", "comma-separated origins (scheme://host[:port]) beside the service's own whose pages may post to it", list(&c.AllowedOrigins), ""},
		{"allowed-hosts", "ALLOWED_HOSTS", "comma-separated names (name or name:port) beside IP addresses and localhost under which the service is reached, e.g. the name a proxy or another container uses; when empty, a request that came to a loopback address with another name is refused (DNS rebinding), one that came to another address is served", list(&c.AllowedHosts), ""},
		{"rabbitmq-url", "RABBITMQ_URL", "RabbitMQ URL (amqp://user:pass@host:5672/) for the mq mode; empty: the mq mode is refused", str(&c.RabbitMQURL), ""},
		{"consume", "CONSUME", "run a consumer that writes the async mode's queued orders (and the mq mode's)", func(fs *flag.FlagSet, name, def, help string) {
			fs.BoolVar(&c.Consume, name, def == "true", help)
		}, "true"},
		{"claim-idle", "CLAIM_IDLE", "how long a queued order may stay delivered to a consumer and unacknowledged before another consumer claims it (it must outlast a batch write with its retries)", dur(&c.ClaimIdle), outbox.DefaultClaimIdle.String()},
		{"reconcile-every", "RECONCILE_EVERY", "how often the reconciler passes over the products sold here; 0 turns it off", dur(&c.ReconcileEvery), "10s"},
		{"reconcile-grace", "RECONCILE_GRACE", "how old a take with no order must be before the reconciler returns its unit; 0 is a purchase's whole time budget", dur(&c.ReconcileGrace), "0s"},
		{"session-secret", "SESSION_SECRET", fmt.Sprintf("key that signs the buyers' tokens (POST /api/sessions), at least %d bytes; every instance must have the same; empty: the first instance on a database makes one and keeps it in the database for every instance, with a copy in Redis (key %s)", session.MinSecret, session.SecretKey), str(&c.SessionSecret), ""},
		{"session-lifetime", "SESSION_LIFETIME", "how long a buyer's token is good for", dur(&c.SessionLifetime), session.DefaultLifetime.String()},
		{"rp-id", "RP_ID", "the passkeys' relying party id: the site's domain as the browser sees it (a passkey is bound to it), never an IP address; empty: the listen address's host when it is a name, else localhost", str(&c.RPID), ""},
		{"rp-origins", "RP_ORIGINS", "comma-separated origins (scheme://host[:port]) of the pages whose passkey ceremonies are taken; empty: http://<rp id>:<the listen port>", list(&c.RPOrigins), ""},
		{"demo-accounts", "DEMO_ACCOUNTS", "the demo sign-in by name alone, without a password, to accounts that have none (made on their first sign-in): true, false, or auto, on when Redis and the database are both the embedded ones (the lab on one machine) and off otherwise", str(&c.DemoAccounts), "auto"},
		{"signups-per-address", "SIGNUPS_PER_ADDRESS", "accounts one client address may make per hour (POST /api/accounts); 0 no limit", num(&c.SignupsAddress), strconv.Itoa(session.DefaultSignupsAddress)},
		{"signups-per-network", "SIGNUPS_PER_NETWORK", "accounts one network (an IPv4 /24, an IPv6 /64) may make per hour; 0 no limit", num(&c.SignupsNetwork), strconv.Itoa(session.DefaultSignupsNetwork)},
		{"signups-before-captcha", "SIGNUPS_BEFORE_CAPTCHA", "accounts one network makes per hour before each further one needs a solved captcha (POST /api/captcha {\"for\":\"account\"}); 0 never asks", num(&c.SignupsCaptcha), strconv.Itoa(session.DefaultSignupsNoCaptcha)},
		{"gate", "GATE_URLS", "comma-separated control URLs (http://host:port) of the sold-out gates in front of the replicas (deploy/gate); each is told when a product has stock again", list(&c.GateURLs), ""},
		{"gate-secret", "GATE_SECRET", "secret the gates' control endpoint requires (header " + api.HeaderGateSecret + ")", str(&c.GateSecret), ""},
		{"shutdown-timeout", "SHUTDOWN_TIMEOUT", "how long in-flight requests may take to finish on shutdown", dur(&c.ShutdownTimeout), "10s"},
		{"log-level", "LOG_LEVEL", "debug, info, warn or error", str(&c.LogLevel), "info"},
		{"v", "VERBOSE", "log the full configuration at start, as -log-level debug does", func(fs *flag.FlagSet, name, def, help string) {
			fs.BoolVar(&c.Verbose, name, def == "true", help)
		}, "false"},
		{"address-rate", "ADDRESS_RATE", "requests per second one client address may send to buy products that are not lab products, sign in, ask for captchas, their images, purchase paths and reservations, and read orders and products that are not lab products (counted before any SQL); 0 turns it off", num(&c.AddressRate), "50"},
		{"trusted-proxies", "TRUSTED_PROXIES", "comma-separated addresses or CIDRs of the proxies in front (the gate) whose X-Forwarded-For names the client; empty: the client is the connection's peer", list(&c.TrustedProxies), ""},
		{"path-ttl", "PATH_TTL", "how long a purchase path token stays valid", dur(&c.PathTTL), "1m"},
		{"header-timeout", "HEADER_TIMEOUT", "how long a connection may take to send a request's headers, its first request's included", dur(&c.HeaderTimeout), DefaultHeaderTimeout.String()},
		{"idle-timeout", "IDLE_TIMEOUT", "how long a keep-alive connection may wait for its next request before it is closed", dur(&c.IdleTimeout), DefaultIdleTimeout.String()},
		{"address-conns", "ADDRESS_CONNS", "the most TCP connections one peer address may hold open; more are closed at once (the trusted proxies are not capped: behind a proxy the peer is the proxy); 0 turns the cap off", num(&c.AddressConns), strconv.Itoa(DefaultAddressConns)},
		{"max-conns", "MAX_CONNS", "the most TCP connections open in all; one more closes the connection that has waited longest for a request, or is refused when all are serving; 0 turns the cap off (default: half the process's open-file limit, leaving the other half to Redis, SQL and files)", num(&c.MaxConns), strconv.Itoa(defaultMaxConns())},
	}
}

// The connection defaults keep one client's idle connections from using up
// the process's descriptors (issue 36, finding 4): a browser holds about
// six connections to a site, a lab run at most api.MaxRunConcurrency.
const (
	DefaultHeaderTimeout = 3 * time.Second
	DefaultIdleTimeout   = 30 * time.Second
	DefaultAddressConns  = 512
)

// defaultMaxConns is half the process's open-file limit (the Go runtime
// raised the soft limit to the hard one at start), or 0, no cap, where the
// limit cannot be read. The other half is the backends': the Redis pool
// holds up to 256 connections, twice that with the embedded Redis's own
// ends in the process, and the connections serving requests use them.
func defaultMaxConns() int { return openFileLimit() / 2 }

// EnvNames lists the environment variables the service reads: its
// settings', and the OpenTelemetry ones (internal/telemetry).
func EnvNames() []string {
	var names []string
	for _, s := range new(Config).settings(func(string) string { return "" }) {
		names = append(names, s.env)
	}
	return append(names, telemetry.EnvNames...)
}

// ParseConfig reads args (without the program name) and the environment
// through getenv; an explicit flag overrides its environment twin. It prints
// nothing: on error (flag.ErrHelp for -h) set the flag set's output and call
// its Usage.
func ParseConfig(name string, args []string, getenv func(string) string) (Config, *flag.FlagSet, error) {
	var c Config
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// Parse prints nothing: the error comes back, and the caller, which owns
	// the output, shows fs.Usage where it wants.
	fs.SetOutput(io.Discard)
	for _, s := range c.settings(getenv) {
		def := s.def
		help := s.help + " [$" + s.env + "]"
		s.bind(fs, s.flag, def, help)
		if v, ok := lookup(getenv, s.env); ok {
			if err := fs.Set(s.flag, v); err != nil {
				return c, fs, fmt.Errorf("$%s: %w", s.env, err)
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		return c, fs, err
	}
	if fs.NArg() > 0 {
		return c, fs, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if c.RedisAddr != "" && len(c.RedisCluster) > 0 {
		return c, fs, fmt.Errorf("-redis and -redis-cluster name two places for the stock: set one")
	}
	if c.SessionSecret != "" && len(c.SessionSecret) < session.MinSecret {
		return c, fs, fmt.Errorf("-session-secret must be at least %d bytes (HS256 wants a key as long as its hash), not %d", session.MinSecret, len(c.SessionSecret))
	}
	if c.SessionLifetime == 0 {
		return c, fs, fmt.Errorf("-session-lifetime must be positive")
	}
	if _, err := c.demo(); err != nil {
		return c, fs, err
	}
	if c.SignupsAddress < 0 || c.SignupsNetwork < 0 || c.SignupsCaptcha < 0 {
		return c, fs, fmt.Errorf("-signups-per-address, -signups-per-network and -signups-before-captcha must not be negative")
	}
	if c.DemoStock < 0 {
		return c, fs, fmt.Errorf("-demo-stock must not be negative")
	}
	if c.AddressRate < 0 {
		return c, fs, fmt.Errorf("-address-rate must not be negative")
	}
	for _, p := range c.TrustedProxies {
		if _, _, err := net.ParseCIDR(p); err != nil && net.ParseIP(p) == nil {
			return c, fs, fmt.Errorf("-trusted-proxies: %q is neither an address nor a CIDR", p)
		}
	}
	if c.AddressConns < 0 || c.MaxConns < 0 {
		return c, fs, fmt.Errorf("-address-conns and -max-conns must not be negative")
	}
	if c.HeaderTimeout == 0 || c.IdleTimeout == 0 {
		return c, fs, fmt.Errorf("-header-timeout and -idle-timeout must be positive: a connection that sends nothing would be held for ever")
	}
	if c.ConcurrencyLimit < 0 {
		return c, fs, fmt.Errorf("-concurrency-limit must not be negative")
	}
	return c, fs, nil
}

// RelyingParty is the passkeys' relying party: -rp-id, or the listen
// address's host when it is a name, else localhost (browsers refuse an IP
// address as an id); and -rp-origins, or the page at that name on the
// listen port.
func (c Config) RelyingParty() (id string, origins []string) {
	host, port, _ := net.SplitHostPort(c.Addr)
	id = c.RPID
	if id == "" {
		id = "localhost"
		if host != "" && net.ParseIP(host) == nil {
			id = host
		}
	}
	origins = c.RPOrigins
	if len(origins) == 0 {
		origins = []string{"http://" + net.JoinHostPort(id, port)}
	}
	return id, origins
}

// Demo reports whether the demo sign-in by name is on: DemoAccounts, or
// when "auto" (or empty) whether Redis and the database are both the
// embedded ones, which only a lab on one machine runs.
func (c Config) Demo() bool {
	on, _ := c.demo()
	return on
}

func (c Config) demo() (bool, error) {
	switch strings.ToLower(c.DemoAccounts) {
	case "", "auto":
		return c.RedisAddr == "" && len(c.RedisCluster) == 0 && c.MySQLDSN == "", nil
	case "true", "1", "on":
		return true, nil
	case "false", "0", "off":
		return false, nil
	}
	return false, fmt.Errorf("-demo-accounts must be true, false or auto, not %q", c.DemoAccounts)
}

func lookup(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// String prints the configuration for the start-up log, secrets masked.
func (c Config) String() string {
	mask := func(s string) string {
		if s == "" {
			return ""
		}
		return "****"
	}
	dsn := c.MySQLDSN
	if at := strings.LastIndex(dsn, "@"); at > 0 {
		if colon := strings.Index(dsn[:at], ":"); colon >= 0 {
			dsn = dsn[:colon+1] + "****" + dsn[at:]
		}
	}
	rpID, rpOrigins := c.RelyingParty()
	rabbit := c.RabbitMQURL
	if u, err := url.Parse(rabbit); err == nil {
		rabbit = u.Redacted()
	}
	return fmt.Sprintf("addr=%s redis=%q redis-cluster=%q redis-nodes=%q mysql=%q rabbitmq=%q rate-limit=%s lock-ttl=%s lock-wait=%s demo-stock=%d admin-token=%q data-dir=%q allowed-origins=%q allowed-hosts=%q consume=%v claim-idle=%s reconcile-every=%s reconcile-grace=%s gate=%q gate-secret=%q address-rate=%d trusted-proxies=%q path-ttl=%s header-timeout=%s idle-timeout=%s address-conns=%d max-conns=%d concurrency-limit=%d session-secret=%q session-lifetime=%s rp-id=%s rp-origins=%q demo-accounts=%v signups-per-address=%d signups-per-network=%d signups-before-captcha=%d",
		c.Addr, c.RedisAddr, c.RedisCluster, c.RedisAddrs, dsn, rabbit, c.RateLimit, c.LockTTL, c.LockWait, c.DemoStock, mask(c.AdminToken), c.DataDir, c.AllowedOrigins, c.AllowedHosts,
		c.Consume, c.ClaimIdle, c.ReconcileEvery, c.ReconcileGrace, c.GateURLs, mask(c.GateSecret), c.AddressRate, c.TrustedProxies, c.PathTTL, c.HeaderTimeout, c.IdleTimeout, c.AddressConns, c.MaxConns, c.ConcurrencyLimit, mask(c.SessionSecret), c.SessionLifetime,
		rpID, rpOrigins, c.Demo(), c.SignupsAddress, c.SignupsNetwork, c.SignupsCaptcha)
}

// defaultDataDir is os.UserConfigDir()/seckill, read through getenv (the
// tests' environment is not the process's): "" where it cannot be said,
// and then the embedded default keeps its token nowhere.
func defaultDataDir(getenv func(string) string) string {
	var dir string
	switch runtime.GOOS {
	case "windows":
		dir = getenv("AppData")
	case "darwin", "ios":
		if home := getenv("HOME"); home != "" {
			dir = filepath.Join(home, "Library", "Application Support")
		}
	default:
		dir = getenv("XDG_CONFIG_HOME")
		if !filepath.IsAbs(dir) {
			dir = ""
			if home := getenv("HOME"); home != "" {
				dir = filepath.Join(home, ".config")
			}
		}
	}
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "seckill")
}
