// Package server is the HTTP face of the order service and the lab: Gin
// routes, JSON in and out (the types of internal/api), the choice of status
// from the sentinel errors of the services behind it, metrics, the admin
// token, and the edge's checks on what a request may be.
package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/github.com/gin-gonic/gin/otelgin"

	"seckill/internal/admission"
	"seckill/internal/api"
	"seckill/internal/catalogue"
	"seckill/internal/idgen"
	"seckill/internal/order"
	"seckill/internal/reconcile"
	"seckill/internal/stock"
	"seckill/internal/telemetry"
)

// Runs serves the lab's load runs; the web page starts them.
type Runs interface {
	// Start starts a run sending its orders to target (this service's own
	// address) unless configured otherwise, resetting its product with
	// token.
	Start(ctx context.Context, spec api.RunSpec, target, token string) (api.Run, error)
	// List lists the runs a seat started and those without a seat, or
	// every run for seat "".
	List(seat string) []api.Run
	Get(id string) (api.Run, error)
	// Timeline is a finished run's race, drawn from its traces.
	Timeline(id string) (*api.Timeline, error)
	// Answer keeps a class seat's answer to a course lesson.
	Answer(a api.ClassAnswer) (api.ClassAnswer, error)
	// Lessons is the class's answers by lesson: the teacher's view.
	Lessons() []api.ClassLesson
	// Close cancels the run going and refuses new ones.
	Close() error
}

// Errors Deps.Health wraps to say which backend did not answer: /healthz
// names the backend and leaves the cause (an address, a driver message) to
// the log.
var (
	ErrRedisDown    = errors.New("redis did not answer")
	ErrDatabaseDown = errors.New("the database did not answer")
)

// Buyer takes purchases (*order.Service).
type Buyer interface {
	Buy(ctx context.Context, in order.Purchase) (order.Order, order.Receipt, error)
	// Now is the sale's clock, for the product's page to count down.
	Now() time.Time
}

// Reader reads a buyer's orders (*order.Reads).
type Reader interface {
	OrderFor(ctx context.Context, id idgen.ID, b order.Buyer) (order.Order, error)
	Written(ctx context.Context, product int64, b order.Buyer, ids []idgen.ID) ([]idgen.ID, error)
}

// Payer pays and cancels a buyer's orders (*order.Lifecycle).
type Payer interface {
	Pay(ctx context.Context, id idgen.ID, b order.Buyer) (order.Order, error)
	Cancel(ctx context.Context, id idgen.ID, b order.Buyer) (order.Order, error)
}

// Catalogue starts sales and says what a product is (*catalogue.Catalogue).
type Catalogue interface {
	Reset(ctx context.Context, spec catalogue.ProductSpec) (catalogue.Product, error)
	CreateIfAbsent(ctx context.Context, spec catalogue.ProductSpec) (catalogue.Product, error)
	Product(ctx context.Context, id int64) (catalogue.Product, error)
	Known(id int64) (lab, ok bool)
	SoldOut(id int64) bool
}

// Door hands out purchase paths and binds captchas to them, and knows the
// refusals that need no buyer (*order.Door).
type Door interface {
	Refusal(product int64, retry bool) error
	IssuePath(ctx context.Context, in order.PathRequest) (admission.PathToken, error)
	CaptchaBinding(ctx context.Context, buyer, product int64) (string, error)
	// Reserve stores a buyer's reservation of a product (idempotent);
	// Reservations counts a product's.
	Reserve(ctx context.Context, product, buyer int64) (order.Reserved, error)
	Reservations(ctx context.Context, product int64) (int64, error)
}

// Auditor audits a product's sale and settles it on demand
// (*reconcile.Reconciler).
type Auditor interface {
	Audit(ctx context.Context, id int64) (reconcile.View, reconcile.Audit, error)
	Drain(ctx context.Context, id int64) (reconcile.Drain, error)
	Reconcile(ctx context.Context, id int64) (reconcile.Reconciliation, error)
	// Returned counts the stranded units given back, for /metrics.
	Returned() int64
}

// Queue reports the async mode's backlog, for /metrics (*order.Queue).
type Queue interface {
	Backlog(ctx context.Context) (stock.Backlog, error)
}

// Captchas makes captchas, draws them and checks their answers
// (*admission.Captchas).
type Captchas interface {
	Allow(ctx context.Context, client netip.Addr) error
	New(ctx context.Context, bind string) (string, error)
	Image(ctx context.Context, id string) ([]byte, error)
	Solve(ctx context.Context, id, answer, bind string) error
}

// AddressLimit limits the requests of one client address
// (*admission.PerAddress).
type AddressLimit interface {
	Allow(ctx context.Context, addr string) error
}

// Deps are what the server needs. A nil interface is a part the service
// does not have; the routes that would use it fail or are absent, as each
// field says.
type Deps struct {
	// Orders takes purchases; Reads reads them for their buyers; Payments
	// pays and cancels them; Catalogue starts sales; Door issues purchase
	// paths (app: the order service and its parts).
	Orders    Buyer
	Reads     Reader
	Payments  Payer
	Catalogue Catalogue
	Door      Door
	// Queue is the async mode's backlog, for /metrics. Default: none, the
	// series are absent.
	Queue Queue
	// Auditor audits the sales of Orders and settles them on demand.
	Auditor Auditor
	// Health checks the backends; an error makes /healthz answer 503. It
	// wraps ErrRedisDown or ErrDatabaseDown.
	Health func(context.Context) (api.Health, error)
	// AdminToken is the operator's credential, required by product
	// creations and resets, the reconciler and lab runs. Empty: those are
	// refused to everyone.
	AdminToken string
	// AllowedOrigins may send state-changing requests beside the service's
	// own origin, e.g. "https://lab.example.com". Default: none.
	AllowedOrigins []string
	// AllowedHosts are the names beside IP addresses and localhost that
	// requests may carry in their Host header, e.g. "seckill" (any port) or
	// "shop.example.com:443". Default: none, and then a request that came to
	// a loopback address must name an IP address or localhost (see
	// checkHost).
	AllowedHosts []string
	// ListenAddr is the address the service listens on (host:port); when
	// its host is a name, requests may carry that name. Default: none.
	ListenAddr string
	// BodyTimeout bounds the reading of a request body. Default: 5s.
	BodyTimeout time.Duration
	// Registry receives the server's metrics. Default: a new registry.
	Registry *prometheus.Registry
	// Web is the page served at /. Default: none.
	Web fs.FS
	// Runs serves /api/runs. Default: none, the routes are absent.
	Runs Runs
	// Sessions signs buyers in (POST /api/sessions) and checks their
	// tokens. Default: none, the route is absent and every token is
	// refused, so that only lab products sell.
	Sessions Sessions
	// Signups bounds the accounts made per address and network (POST
	// /api/accounts). Default: none.
	Signups Signups
	// Passkeys registers passkeys and signs buyers in with them
	// (*session.Passkeys). Default: none, the routes are absent.
	Passkeys Passkeys
	// PasskeyOrigins are the origins whose pages may use the passkeys,
	// for the page to say so. Default: none.
	PasskeyOrigins []string
	// Gate counts the notices sent to the sold-out gates in front
	// (*gate.Notifier), for /metrics. Default: none, the series are absent.
	Gate GateNotices
	// Captchas makes the captchas that guard purchase paths and
	// sign-ups. Default: none, /api/captcha answers 503.
	Captchas Captchas
	// PerAddress limits the public's sign-ins, captchas and path tokens
	// per client address (purchases are limited in order). Default: none.
	PerAddress AddressLimit
	// TrustedProxies are the addresses or CIDRs whose X-Forwarded-For
	// names the client (the gate in front). Default: none: the client is
	// the connection's peer, whatever the header says.
	TrustedProxies []string
	Log            *slog.Logger // default slog.Default()
	// Admission is the purchases' concurrency limit (*admission.Gradient),
	// for /metrics. Default: none, the series are absent.
	Admission AdmissionStats
	// Consumers are the queues' consumers by queue ("streams",
	// "rabbitmq"), for /metrics. Default: none, the series are absent.
	Consumers map[string]ConsumerStats
	// Trace makes every request but /metrics' and /healthz's a span
	// (otelgin, on the global tracer provider: internal/telemetry), the
	// parent of the purchase's. Default: off, no middleware.
	Trace bool
}

// DefaultBodyTimeout is Deps.BodyTimeout's default: with ReadHeaderTimeout
// (5s) it keeps a request within the ReadTimeout (10s) it had before.
const DefaultBodyTimeout = 5 * time.Second

// MaxHeaderBytes bounds a request's headers (http.Server.MaxHeaderBytes);
// net/http answers 431 beyond it.
const MaxHeaderBytes = 64 << 10

// Server is the HTTP handler: the routes of routes.go, each served by the
// part that owns what it needs.
type Server struct {
	edge     *edge
	shop     *shop
	accounts *accounts
	bots     botRoutes
	lab      labRoutes
	health   func(context.Context) (api.Health, error)
	log      *slog.Logger
	web      fs.FS
	metrics  *metrics
	engine   *gin.Engine
}

// edge is what every route shares: the checks on a request (host, origin,
// method, body, the operator's token, the address's rate), the reading of
// its body and buyer, and the answer of a failure.
type edge struct {
	log         *slog.Logger
	bodyTimeout time.Duration
	adminToken  string
	classToken  string          // ClassToken(adminToken); "" without one
	sessions    Sessions        // verifies buyers' tokens; nil: all refused
	perAddr     AddressLimit    // nil: no limit
	origins     map[string]bool // normalized AllowedOrigins
	hosts       map[string]bool // AllowedHosts, lowercased
	// listenHost is ListenAddr's host when it is a name, else "".
	listenHost string
}

// shop serves the products and their orders: sales, purchases, payments,
// audits.
type shop struct {
	e       *edge
	orders  Buyer
	reads   Reader
	door    Door
	pay     Payer
	cat     Catalogue
	audit   Auditor
	metrics *metrics
}

// accounts serves the buyers' accounts and sessions, passwords and
// passkeys.
type accounts struct {
	e              *edge
	sessions       Sessions
	signups        Signups
	captchas       Captchas
	passkeys       Passkeys
	passkeyOrigins []string
}

// New builds the handler.
func New(deps Deps) *Server {
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.Registry == nil {
		deps.Registry = prometheus.NewRegistry()
	}
	if deps.BodyTimeout <= 0 {
		deps.BodyTimeout = DefaultBodyTimeout
	}
	gin.SetMode(gin.ReleaseMode)
	m := newMetrics(deps.Registry)
	e := &edge{log: deps.Log, bodyTimeout: deps.BodyTimeout, adminToken: deps.AdminToken, classToken: ClassToken(deps.AdminToken), sessions: deps.Sessions,
		perAddr: deps.PerAddress, origins: make(map[string]bool), hosts: hostSet(deps.AllowedHosts)}
	if h, _ := splitHost(deps.ListenAddr); h != "" && net.ParseIP(h) == nil {
		e.listenHost = h
	}
	for _, o := range deps.AllowedOrigins {
		e.origins[normalizeOrigin(o)] = true
	}
	s := &Server{edge: e, health: deps.Health, log: deps.Log, web: deps.Web, metrics: m,
		shop: &shop{e: e, orders: deps.Orders, reads: deps.Reads, door: deps.Door, pay: deps.Payments, cat: deps.Catalogue, audit: deps.Auditor, metrics: m},
		accounts: &accounts{e: e, sessions: deps.Sessions, signups: deps.Signups, captchas: deps.Captchas,
			passkeys: deps.Passkeys, passkeyOrigins: deps.PasskeyOrigins},
		bots: botRoutes{e: e, captchas: deps.Captchas, door: deps.Door},
		lab:  labRoutes{e: e, runs: deps.Runs},
	}
	if deps.Queue != nil {
		deps.Registry.MustRegister(newBacklog(deps.Queue))
	}
	if deps.Gate != nil {
		deps.Registry.MustRegister(newGateCounts(deps.Gate))
	}
	if deps.Admission != nil {
		deps.Registry.MustRegister(admissionMetrics(deps.Admission)...)
	}
	if len(deps.Consumers) > 0 {
		deps.Registry.MustRegister(newConsumerCounts(deps.Consumers))
	}
	if deps.Auditor != nil {
		rec := deps.Auditor
		deps.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "seckill_reconciler_returned_total",
			Help: "Stranded units this process's reconciler gave back to their shards: takes whose order was never written."},
			func() float64 { return float64(rec.Returned()) }))
	}
	r := gin.New()
	// gin trusts every proxy by default, which lets any client pick its
	// own address in X-Forwarded-For and walk past the per-address limit.
	// A list gin cannot read trusts none (app checks it at start).
	if err := r.SetTrustedProxies(deps.TrustedProxies); err != nil {
		deps.Log.Error("trusting no proxy: the list does not read", "error", err)
		_ = r.SetTrustedProxies(nil)
	}
	// Handlers pass c.Request.Context(), never c itself, to Redis and SQL:
	// gin recycles its Context when the handler returns, while database/sql
	// may still be watching the context it was given.
	r.HandleMethodNotAllowed = true
	r.NoMethod(func(c *gin.Context) { e.fail(c, http.StatusMethodNotAllowed, api.CodeBadRequest, "method not allowed") })
	if deps.Trace {
		r.Use(otelgin.Middleware(telemetry.Name, otelgin.WithGinFilter(func(c *gin.Context) bool {
			return c.FullPath() != "/metrics" && c.FullPath() != "/healthz"
		})))
	}
	r.Use(secureHeaders, e.recover, m.observe, e.checkHost, e.checkOrigin, e.allowMethods, limitBody)
	s.routes(r)
	s.engine = r
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.engine.ServeHTTP(w, r) }

// bearer is the token of the Authorization header, "" without one.
func bearer(c *gin.Context) string {
	token, _ := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	return token
}

// admin requires the operator token. A server built without one (no
// AdminToken: app always gives one) lets no operator request through.
func (s *edge) admin(c *gin.Context) {
	if !s.isOperator(c) {
		s.fail(c, http.StatusUnauthorized, api.CodeUnauthorized,
			"this action is the operator's: send the header Authorization: Bearer <ADMIN_TOKEN> (when ADMIN_TOKEN is not set, the service’s “seckill serving” line says it or how to read it from Redis, key "+OperatorTokenKey+")")
		c.Abort()
	}
}

// isOperator reports whether the request carries the operator token.
func (s *edge) isOperator(c *gin.Context) bool { return holds(c, s.adminToken) }

// inClass reports whether the request carries the class token or the
// operator's.
func (s *edge) inClass(c *gin.Context) bool { return holds(c, s.classToken) || s.isOperator(c) }

// holds reports whether the request's bearer token is want, never for a
// want of "".
func holds(c *gin.Context, want string) bool {
	got, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	return want != "" && ok && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// class requires the class token or the operator's: a class's lab runs
// and lesson answers, which students send without holding the operator's
// power over products and accounts.
func (s *edge) class(c *gin.Context) {
	if !s.inClass(c) {
		s.fail(c, http.StatusUnauthorized, api.CodeUnauthorized,
			"this action is a class's: send the header Authorization: Bearer <class token> (the service’s “seckill serving” line says it; the operator token does too)")
		c.Abort()
	}
}

// ClassToken is the class token of the operator token operator: a
// student's credential for lab runs and lesson answers, which the serving
// line says beside the operator's. It is derived (HMAC-SHA256 of a fixed
// label, keyed by the operator token), so every instance sharing the
// operator token accepts it, nothing is stored, and it changes with the
// operator token. "" for "".
func ClassToken(operator string) string {
	if operator == "" {
		return ""
	}
	mac := hmac.New(sha256.New, []byte(operator))
	mac.Write([]byte("seckill class token v1"))
	return "class-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(mac.Sum(nil)[:15]))
}

// OperatorTokenKey is the Redis key of the operator token the service
// makes when ADMIN_TOKEN is not set (internal/app keeps it there).
const OperatorTokenKey = "seckill:admin-token"

// recover turns a panic into a logged 500 instead of a dropped connection.
// A panic is a bug; the handlers are written not to have one.
func (s *edge) recover(c *gin.Context) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("panic serving a request", "route", c.FullPath(), "panic", v)
			s.fail(c, http.StatusInternalServerError, api.CodeInternal, "internal error")
			c.Abort()
		}
	}()
	c.Next()
}
