package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"seckill/internal/server"
)

// contract is docs/openapi.yaml's router: every exchange the tests make
// through env.send is checked against it (checkContract).
var contract = sync.OnceValues(func() (routers.Router, error) {
	openapi3filter.RegisterBodyDecoder("image/png", openapi3filter.FileBodyDecoder)
	b, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		return nil, err
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		return nil, err
	}
	return legacy.NewRouter(doc)
})

// checkContract fails the test if an exchange breaks docs/openapi.yaml:
// every answer of a described route must be one the description allows,
// and a request the service accepted (2xx) must be one it describes. A
// route the description lacks is a failure when the service answered it
// 2xx under /api/ (a route added without its description); the page's
// files and the 404s of unknown routes are not the API's.
func checkContract(t testing.TB, req *http.Request, reqBody []byte, status int, header http.Header, body []byte) {
	t.Helper()
	router, err := contract()
	if err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, err := router.FindRoute(r)
	if err != nil {
		if status < 300 && (strings.HasPrefix(r.URL.Path, "/api/") || r.URL.Path == "/healthz") {
			t.Errorf("%s %s answered %d and is not in docs/openapi.yaml: %v", r.Method, r.URL.Path, status, err)
		}
		return
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: opts}
	if status >= 200 && status < 300 {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			t.Errorf("%s %s %q was answered %d but breaks docs/openapi.yaml: %v", r.Method, r.URL.Path, reqBody, status, err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: header, Options: opts}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s %s answered %d %.300s, which breaks docs/openapi.yaml: %v", r.Method, r.URL.Path, status, body, err)
	}
}

// recorder is a testing.TB that keeps its failures instead of failing.
type recorder struct {
	testing.TB
	failures []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...) }
func (r *recorder) Helper()                           {}

// TestContractCatchesADrift: the check every exchange goes through fails
// an answer, or an accepted request, that docs/openapi.yaml does not
// describe, and passes one it does.
func TestContractCatchesADrift(t *testing.T) {
	order := `{"id":"1","product_id":2,"sale":1,"user_id":7,"shard":0,"lock":"token","mode":"rmw","status":"unpaid","created_at":"2026-11-28T17:00:00Z"}`
	json := http.Header{"Content-Type": {"application/json; charset=utf-8"}}
	for _, tc := range []struct {
		name, method, path, sent string
		status                   int
		answer                   string
		drift                    bool
	}{
		{"an order as described", "POST", "/api/orders", `{"product_id":2,"user_id":7}`, 201, order, false},
		{"an error as described", "POST", "/api/orders", `{"product_id":"2"}`, 400, `{"code":"bad_request","error":"field \"product_id\" must be a number"}`, false},
		{"an id as a number", "GET", "/api/orders/1", "", 200, strings.Replace(order, `"id":"1"`, `"id":1`, 1), true},
		{"a field dropped", "GET", "/api/orders/1", "", 200, strings.Replace(order, `"status":"unpaid",`, "", 1), true},
		{"a field not described", "GET", "/api/orders/1", "", 200, strings.Replace(order, `"sale":1`, `"sale":1,"secret":true`, 1), true},
		{"an error without its code", "GET", "/api/orders/1", "", 404, `{"error":"no such order"}`, true},
		{"an accepted body not described", "POST", "/api/orders", `{"product_id":"2"}`, 201, order, true},
		{"a route not described", "GET", "/api/secret", "", 200, `{}`, true},
	} {
		var body io.Reader
		if tc.sent != "" {
			body = strings.NewReader(tc.sent)
		}
		req, err := http.NewRequest(tc.method, "http://127.0.0.1:1"+tc.path, body)
		if err != nil {
			t.Fatal(err)
		}
		if tc.sent != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		r := &recorder{TB: t}
		checkContract(r, req, []byte(tc.sent), tc.status, json, []byte(tc.answer))
		if drift := len(r.failures) > 0; drift != tc.drift {
			t.Errorf("%s: the check failed %v (%q), want %v", tc.name, drift, r.failures, tc.drift)
		}
	}
}

// TestOpenAPIServed: GET /openapi.json is docs/openapi.yaml, as JSON.
func TestOpenAPIServed(t *testing.T) {
	e := serve(t, server.Deps{})
	resp, err := e.client.Get(e.url + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	served, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d %v", resp.StatusCode, err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(served)
	if err != nil {
		t.Fatalf("GET /openapi.json is no description: %v", err)
	}
	file, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want, err := openapi3.NewLoader().LoadFromData(file)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := doc.MarshalJSON()
	b, _ := want.MarshalJSON()
	if !bytes.Equal(a, b) {
		t.Fatal("GET /openapi.json is not docs/openapi.yaml")
	}
}
