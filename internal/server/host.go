package server

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// errUnknownHost: the request's Host is not a name this service is served
// under (421).
var errUnknownHost = fmt.Errorf("unknown host")

// checkHost refuses, before any handler, a request whose Host is not one the
// service serves. DNS rebinding makes a page's own name (evil.example) point
// at the service's address: the browser then sends Host and Origin both
// evil.example, which the origin check alone takes for the service's own.
// Such a page's Host is always a name of the attacker's, so what passes is
// an IP address (nobody rebinds one), localhost, the name the service
// listens on, and the names of ALLOWED_HOSTS. A request that arrived on a
// non-loopback address is let through under any Host when no ALLOWED_HOSTS
// is set (the service was bound beyond loopback and the operator named no
// hosts: cmd/seckill says so at start); on loopback, never.
func (s *edge) checkHost(c *gin.Context) {
	if s.servesHost(c.Request) {
		return
	}
	s.failErr(c, fmt.Errorf("%w: this service does not answer to Host %q; list it in ALLOWED_HOSTS to allow it", errUnknownHost, c.Request.Host))
	c.Abort()
}

func (s *edge) servesHost(r *http.Request) bool {
	host, port := splitHost(r.Host)
	if host == "localhost" || net.ParseIP(host) != nil || s.hosts[host] || s.hosts[host+":"+port] || host == s.listenHost {
		return true
	}
	if len(s.hosts) > 0 {
		return false
	}
	// No list: only a request that came to a non-loopback address passes.
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	ip, _ := splitHost(local.String())
	return !net.ParseIP(ip).IsLoopback()
}

// splitHost lowercases a Host (or host:port) and parts it, without the
// brackets of an IPv6 address; port is "" when there is none.
func splitHost(hostport string) (host, port string) {
	hostport = strings.ToLower(strings.TrimSpace(hostport))
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return h, p
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), ""
}

// hostSet is the names of ALLOWED_HOSTS: each "name" (any port) or
// "name:port".
func hostSet(allowed []string) map[string]bool {
	set := make(map[string]bool)
	for _, h := range allowed {
		if host, port := splitHost(h); port != "" {
			set[host+":"+port] = true
		} else if host != "" {
			set[host] = true
		}
	}
	return set
}
