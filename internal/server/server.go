// Package server is the HTTP face of the order service: Gin routes, JSON in
// and out, the choice of status from the service's sentinel errors, metrics,
// and the admin token.
package server

import (
	"context"
	"crypto/subtle"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"seckill/internal/order"
)

// Health is what /healthz reports when everything answers.
type Health struct {
	Status string `json:"status"`
	Mode   string `json:"mode"`  // "embedded" or "external"
	Redis  string `json:"redis"` // server version
	SQL    string `json:"sql"`   // dialect and version
}

// Runs serves the lab's load runs; the web page starts them.
type Runs interface {
	Start(w http.ResponseWriter, r *http.Request)
	List(w http.ResponseWriter, r *http.Request)
	Get(w http.ResponseWriter, r *http.Request, id string)
}

// Deps are what the server needs.
type Deps struct {
	Orders *order.Service
	// Health checks the backends; an error makes /healthz answer 503.
	Health func(context.Context) (Health, error)
	// AdminToken, when set, is required by product resets and lab runs.
	AdminToken string
	// Registry receives the server's metrics. Default: a new registry.
	Registry *prometheus.Registry
	// Web is the page served at /. Default: none.
	Web fs.FS
	// Runs serves /api/runs. Default: none, the routes are absent.
	Runs Runs
	Log  *slog.Logger // default slog.Default()
}

// Server is the HTTP handler.
type Server struct {
	deps    Deps
	metrics *metrics
	engine  *gin.Engine
}

// New builds the handler.
func New(deps Deps) *Server {
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.Registry == nil {
		deps.Registry = prometheus.NewRegistry()
	}
	gin.SetMode(gin.ReleaseMode)
	s := &Server{deps: deps, metrics: newMetrics(deps.Registry)}
	r := gin.New()
	// Handlers pass c.Request.Context(), never c itself, to Redis and SQL:
	// gin recycles its Context when the handler returns, while database/sql
	// may still be watching the context it was given.
	r.HandleMethodNotAllowed = true
	r.NoMethod(func(c *gin.Context) { s.fail(c, http.StatusMethodNotAllowed, codeBadRequest, "method not allowed") })
	r.Use(s.recover, s.metrics.observe, limitBody)
	s.routes(r)
	s.engine = r
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.engine.ServeHTTP(w, r) }

// admin requires the admin token when one is configured.
func (s *Server) admin(c *gin.Context) {
	want := s.deps.AdminToken
	if want == "" {
		return
	}
	got, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		s.fail(c, http.StatusUnauthorized, codeUnauthorized, "this action needs the header Authorization: Bearer <ADMIN_TOKEN>")
		c.Abort()
	}
}

// recover turns a panic into a logged 500 instead of a dropped connection.
// A panic is a bug; the handlers are written not to have one.
func (s *Server) recover(c *gin.Context) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.deps.Log.Error("panic serving a request", "route", c.FullPath(), "panic", v)
			s.fail(c, http.StatusInternalServerError, "internal", "internal error")
			c.Abort()
		}
	}()
	c.Next()
}

// maxBody bounds request bodies; every body this API takes is small.
const maxBody = 64 << 10

func limitBody(c *gin.Context) {
	if c.Request.Body != nil {
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxBody)
	}
}
