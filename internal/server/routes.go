package server

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// routes is the whole API in one screen.
func (s *Server) routes(r *gin.Engine) {
	r.GET("/healthz", s.handleHealth)
	r.GET("/metrics", gin.WrapH(s.metrics.handler()))

	api := r.Group("/api")
	api.GET("/locks", s.handleLocks)
	api.POST("/products", s.admin, s.handleResetProduct)
	api.GET("/products/:id", s.handleProduct)
	api.GET("/products/:id/audit", s.handleAudit)
	api.POST("/orders", s.handleBuy)
	api.GET("/orders/:id", s.handleOrder)
	if s.deps.Runs != nil {
		api.POST("/runs", s.admin, gin.WrapF(s.deps.Runs.Start))
		api.GET("/runs", gin.WrapF(s.deps.Runs.List))
		api.GET("/runs/:id", func(c *gin.Context) { s.deps.Runs.Get(c.Writer, c.Request, c.Param("id")) })
	}

	noRoute := func(c *gin.Context) { s.fail(c, http.StatusNotFound, codeNotFound, "no such route") }
	if s.deps.Web != nil {
		files := gin.WrapH(http.FileServerFS(s.deps.Web))
		noRoute = func(c *gin.Context) {
			if strings.HasPrefix(c.Request.URL.Path, "/api/") {
				s.fail(c, http.StatusNotFound, codeNotFound, "no such route")
				return
			}
			files(c)
		}
	}
	r.NoRoute(noRoute)
}
