package server

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"seckill/internal/api"
)

// routes is the whole API in one screen.
func (s *Server) routes(r *gin.Engine) {
	r.GET("/healthz", s.handleHealth)
	r.GET("/metrics", gin.WrapH(s.metrics.handler()))

	lr, br := labRoutes{s}, botRoutes{s}
	g := r.Group("/api")
	g.GET("/locks", lr.handleLocks)
	g.GET("/modes", lr.handleModes)
	g.POST("/products", s.admin, s.handleResetProduct)
	g.GET("/products/:id", s.handleProduct)
	g.GET("/products/:id/audit", s.handleAudit)
	g.GET("/products/:id/drain", s.handleDrain)
	g.POST("/products/:id/path", s.perAddress, br.handleIssuePath)
	g.POST("/products/:id/reconcile", s.admin, s.handleReconcile)
	if s.deps.Sessions != nil {
		g.POST("/accounts", s.perAddress, s.handleCreateAccount)
		g.POST("/accounts/bulk", s.admin, s.handleBulkAccounts)
		g.GET("/accounts/options", s.handleAccountOptions)
		g.POST("/accounts/current/password", s.perAddress, s.handleChangePassword)
		g.POST("/sessions", s.perAddress, s.handleSignIn)
		g.GET("/sessions/current", s.handleCurrentSession)
		g.DELETE("/sessions/current", s.handleSignOut)
	}
	if s.deps.Sessions != nil && s.deps.Passkeys != nil {
		g.POST("/accounts/current/passkeys/begin", s.perAddress, s.handlePasskeyBeginRegistration)
		g.POST("/accounts/current/passkeys/finish", s.perAddress, s.handlePasskeyFinishRegistration)
		g.POST("/sessions/passkey/begin", s.perAddress, s.handlePasskeyBeginSignIn)
		g.POST("/sessions/passkey/finish", s.perAddress, s.handlePasskeyFinishSignIn)
	}
	g.POST("/captcha", s.perAddress, br.handleNewCaptcha)
	g.GET("/captcha/:id", s.perAddress, br.handleCaptchaImage)
	g.POST("/orders", s.handleBuy)
	g.POST("/orders/lookup", s.handleLookup)
	g.GET("/orders/:id", s.perAddress, s.handleOrder)
	g.POST("/orders/:id/pay", s.handlePay)
	g.POST("/orders/:id/cancel", s.handleCancel)
	if s.deps.Runs != nil {
		g.POST("/runs", s.admin, lr.handleStartRun)
		g.GET("/runs", lr.handleRuns)
		g.GET("/runs/:id", lr.handleRun)
		g.GET("/runs/:id/timeline", lr.handleRunTimeline)
	}

	noRoute := func(c *gin.Context) { s.fail(c, http.StatusNotFound, api.CodeNotFound, "no such route") }
	if s.deps.Web != nil {
		files := gin.WrapH(http.FileServerFS(s.deps.Web))
		noRoute = func(c *gin.Context) {
			if strings.HasPrefix(c.Request.URL.Path, "/api/") {
				s.fail(c, http.StatusNotFound, api.CodeNotFound, "no such route")
				return
			}
			files(c)
		}
	}
	r.NoRoute(noRoute)
}
