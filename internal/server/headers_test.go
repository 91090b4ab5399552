package server_test

import (
	"net/http"
	"strings"
	"testing"
	"testing/fstest"

	"seckill/internal/server"
)

// Every answer, the page's and the API's, refusals and misses included,
// forbids framing (issue 36, finding 9: a framed Reset was one click) and
// carries the page's Content-Security-Policy.
func TestEveryAnswerForbidsFraming(t *testing.T) {
	e := serve(t, server.Deps{AdminToken: "op", Web: fstest.MapFS{"index.html": {Data: []byte("<title>lab</title>")}}})
	for _, tc := range []struct {
		method, path, host string
		status             int
	}{
		{"GET", "/", "", http.StatusOK},
		{"GET", "/index.html", "", http.StatusMovedPermanently},
		{"GET", "/nothing.js", "", http.StatusNotFound},
		{"GET", "/api/nothing", "", http.StatusNotFound},
		{"POST", "/api/products", "", http.StatusUnauthorized},
		{"PUT", "/api/products", "", http.StatusMethodNotAllowed},
		{"GET", "/", "rebound.example", http.StatusMisdirectedRequest},
	} {
		req, _ := http.NewRequest(tc.method, e.url+tc.path, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		if tc.host != "" {
			req.Host = tc.host
		}
		resp, err := noRedirects.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s (Host %q): %d, want %d", tc.method, tc.path, tc.host, resp.StatusCode, tc.status)
		}
		csp := h.Get("Content-Security-Policy")
		if h.Get("X-Frame-Options") != "DENY" || !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") ||
			h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s (Host %q), %d: X-Frame-Options %q, CSP %q, X-Content-Type-Options %q: want DENY, frame-ancestors 'none' and script-src 'self', nosniff",
				tc.method, tc.path, tc.host, resp.StatusCode, h.Get("X-Frame-Options"), csp, h.Get("X-Content-Type-Options"))
		}
	}
}

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
