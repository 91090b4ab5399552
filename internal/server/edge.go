package server

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"seckill/internal/api"
)

// routedMethods are the methods some route answers: GET and POST for the
// API, HEAD for the page's files; and DELETE, on /api/ only (a session).
var routedMethods = map[string]bool{http.MethodGet: true, http.MethodHead: true, http.MethodPost: true}

// allowMethods answers 405 to a method no route takes (TRACE, OPTIONS, …),
// before the page's file server, which would serve a file to any method.
func (s *edge) allowMethods(c *gin.Context) {
	apiDelete := c.Request.Method == http.MethodDelete && strings.HasPrefix(c.Request.URL.Path, "/api/")
	if !routedMethods[c.Request.Method] && !apiDelete {
		c.Header("Allow", "GET, HEAD, POST")
		s.fail(c, http.StatusMethodNotAllowed, api.CodeBadRequest, "method not allowed")
		c.Abort()
	}
}

// stateChanging are the methods a cross-site page must not send on a
// visitor's behalf.
var stateChanging = map[string]bool{http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true, http.MethodDelete: true}

// checkOrigin refuses a state-changing request that a browser sent from
// another site's page (its Origin is neither this service's nor allowed).
// Clients other than browsers send no Origin and are not concerned.
func (s *edge) checkOrigin(c *gin.Context) {
	origin := c.GetHeader("Origin")
	if origin == "" || !stateChanging[c.Request.Method] {
		return
	}
	scheme := "http"
	if c.Request.TLS != nil {
		scheme = "https"
	}
	o := normalizeOrigin(origin)
	if o == normalizeOrigin(scheme+"://"+c.Request.Host) || s.origins[o] {
		return
	}
	s.fail(c, http.StatusForbidden, api.CodeForbiddenOrigin,
		"origin "+origin+" may not change anything here; list it in ALLOWED_ORIGINS to allow it")
	c.Abort()
}

// normalizeOrigin lowercases an origin (scheme and host are
// case-insensitive) and drops a trailing slash a configuration may carry.
func normalizeOrigin(o string) string {
	return strings.ToLower(strings.TrimSuffix(strings.TrimSpace(o), "/"))
}

// maxBody bounds request bodies; every body this API takes is small.
const maxBody = 64 << 10

func limitBody(c *gin.Context) {
	if c.Request.Body != nil {
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxBody)
	}
}
