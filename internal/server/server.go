// Package server is the HTTP face of the order service and the lab: Gin
// routes, JSON in and out (the types of internal/api), the choice of status
// from the sentinel errors of the services behind it, metrics, the admin
// token, and the edge's checks on what a request may be.
package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/github.com/gin-gonic/gin/otelgin"

	"seckill/internal/admission"
	"seckill/internal/api"
	"seckill/internal/order"
	"seckill/internal/reconcile"
	"seckill/internal/telemetry"
)

// Runs serves the lab's load runs; the web page starts them.
type Runs interface {
	// Start starts a run sending its orders to target (this service's own
	// address) unless configured otherwise, resetting its product with
	// token.
	Start(ctx context.Context, spec api.RunSpec, target, token string) (api.Run, error)
	List() []api.Run
	Get(id string) (api.Run, error)
	// Timeline is a finished run's race, drawn from its traces.
	Timeline(id string) (*api.Timeline, error)
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

// Deps are what the server needs.
type Deps struct {
	Orders *order.Service
	// Reconciler audits the sales of Orders and settles them on demand.
	Reconciler *reconcile.Reconciler
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
	// Paths issues purchase path tokens; Captchas makes the captchas
	// that guard them. Default: none, POST /api/products/:id/path and
	// /api/captcha answer 503.
	Paths    *admission.Paths
	Captchas *admission.Captchas
	// PerAddress limits the public's sign-ins, captchas and path tokens
	// per client address (purchases are limited in order). Default: none.
	PerAddress *admission.PerAddress
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

// Server is the HTTP handler.
type Server struct {
	deps    Deps
	origins map[string]bool // normalized AllowedOrigins
	hosts   map[string]bool // AllowedHosts, lowercased
	// listenHost is ListenAddr's host when it is a name, else "".
	listenHost string
	metrics    *metrics
	engine     *gin.Engine
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
	s := &Server{deps: deps, metrics: newMetrics(deps.Registry), origins: make(map[string]bool)}
	if deps.Orders != nil {
		deps.Registry.MustRegister(newBacklog(deps.Orders))
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
	if deps.Reconciler != nil {
		rec := deps.Reconciler
		deps.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "seckill_reconciler_returned_total",
			Help: "Stranded units this process's reconciler gave back to their shards: takes whose order was never written."},
			func() float64 { return float64(rec.Returned()) }))
	}
	s.hosts = hostSet(deps.AllowedHosts)
	if h, _ := splitHost(deps.ListenAddr); h != "" && net.ParseIP(h) == nil {
		s.listenHost = h
	}
	for _, o := range deps.AllowedOrigins {
		s.origins[normalizeOrigin(o)] = true
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
	r.NoMethod(func(c *gin.Context) { s.fail(c, http.StatusMethodNotAllowed, api.CodeBadRequest, "method not allowed") })
	if deps.Trace {
		r.Use(otelgin.Middleware(telemetry.Name, otelgin.WithGinFilter(func(c *gin.Context) bool {
			return c.FullPath() != "/metrics" && c.FullPath() != "/healthz"
		})))
	}
	r.Use(secureHeaders, s.recover, s.metrics.observe, s.checkHost, s.checkOrigin, s.allowMethods, limitBody)
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
func (s *Server) admin(c *gin.Context) {
	want := s.deps.AdminToken
	got, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	if want == "" || !ok || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		s.fail(c, http.StatusUnauthorized, api.CodeUnauthorized,
			"this action is the operator's: send the header Authorization: Bearer <ADMIN_TOKEN> (when ADMIN_TOKEN is not set, the service made one at start: its log says it, and Redis keeps it at "+OperatorTokenKey+")")
		c.Abort()
	}
}

// OperatorTokenKey is the Redis key of the operator token the service
// makes when ADMIN_TOKEN is not set (internal/app keeps it there).
const OperatorTokenKey = "seckill:admin-token"

// recover turns a panic into a logged 500 instead of a dropped connection.
// A panic is a bug; the handlers are written not to have one.
func (s *Server) recover(c *gin.Context) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.deps.Log.Error("panic serving a request", "route", c.FullPath(), "panic", v)
			s.fail(c, http.StatusInternalServerError, api.CodeInternal, "internal error")
			c.Abort()
		}
	}()
	c.Next()
}
