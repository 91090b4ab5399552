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
	r.GET("/openapi.json", s.handleOpenAPI)

	e, shop, acc, br, lr := s.edge, s.shop, s.accounts, s.bots, s.lab
	g := r.Group("/api")
	g.GET("/locks", lr.handleLocks)
	g.GET("/modes", lr.handleModes)
	g.POST("/products", e.admin, shop.handleResetProduct)
	g.GET("/products/:id", shop.handleProduct)
	g.GET("/products/:id/audit", shop.handleAudit)
	g.GET("/products/:id/drain", shop.handleDrain)
	g.POST("/products/:id/path", e.perAddress, br.handleIssuePath)
	g.POST("/products/:id/reservation", e.perAddress, shop.handleReserve)
	g.POST("/products/:id/reconcile", e.admin, shop.handleReconcile)
	if acc.sessions != nil {
		g.POST("/accounts", e.perAddress, acc.handleCreateAccount)
		g.POST("/accounts/bulk", e.admin, acc.handleBulkAccounts)
		g.GET("/accounts/options", acc.handleAccountOptions)
		g.POST("/accounts/current/password", e.perAddress, acc.handleChangePassword)
		g.POST("/sessions", e.perAddress, acc.handleSignIn)
		g.GET("/sessions/current", acc.handleCurrentSession)
		g.DELETE("/sessions/current", acc.handleSignOut)
	}
	if acc.sessions != nil && acc.passkeys != nil {
		g.POST("/accounts/current/passkeys/begin", e.perAddress, acc.handlePasskeyBeginRegistration)
		g.POST("/accounts/current/passkeys/finish", e.perAddress, acc.handlePasskeyFinishRegistration)
		g.POST("/sessions/passkey/begin", e.perAddress, acc.handlePasskeyBeginSignIn)
		g.POST("/sessions/passkey/finish", e.perAddress, acc.handlePasskeyFinishSignIn)
	}
	g.POST("/captcha", e.perAddress, br.handleNewCaptcha)
	g.GET("/captcha/:id", e.perAddress, br.handleCaptchaImage)
	g.POST("/orders", shop.handleBuy)
	g.POST("/orders/lookup", shop.handleLookup)
	g.GET("/orders/:id", e.perAddress, shop.handleOrder)
	g.POST("/orders/:id/pay", shop.handlePay)
	g.POST("/orders/:id/cancel", shop.handleCancel)
	if lr.runs != nil {
		g.POST("/runs", e.class, lr.handleStartRun)
		g.GET("/runs", lr.handleRuns)
		g.GET("/runs/:id", lr.handleRun)
		g.GET("/runs/:id/timeline", lr.handleRunTimeline)
		g.POST("/class/answers", e.class, lr.handleAnswer)
		g.GET("/class/answers", e.admin, lr.handleLessons)
	}

	noRoute := func(c *gin.Context) { e.fail(c, http.StatusNotFound, api.CodeNotFound, "no such route") }
	if s.web != nil {
		files := gin.WrapH(http.FileServerFS(s.web))
		noRoute = func(c *gin.Context) {
			if strings.HasPrefix(c.Request.URL.Path, "/api/") {
				e.fail(c, http.StatusNotFound, api.CodeNotFound, "no such route")
				return
			}
			files(c)
		}
	}
	r.NoRoute(noRoute)
}
