package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/lab"
	"seckill/internal/server"
	"seckill/internal/testkit/testenv"
)

// TestBodiesAreStrictJSON: every body (products, orders, runs) goes through
// one decoder that takes each name once and exactly as documented.
func TestBodiesAreStrictJSON(t *testing.T) {
	e := startWith(t, testenv.Config(t), app.Extras{Runs: lab.New(lab.Options{Run: instant})})
	id := e.reset(product{"stock": 10})
	pid := fmt.Sprint(id)
	for _, tc := range []struct {
		name, path, body, want string
	}{
		{"order: duplicate key", "/api/orders", `{"user_id": 1, "user_id": 2, "product_id": ` + pid + `}`, `duplicate key "user_id"`},
		{"order: wrong case", "/api/orders", `{"User_ID": 1, "product_id": ` + pid + `}`, `unknown field "User_ID": names are case-sensitive, this one is "user_id"`},
		{"order: unknown field", "/api/orders", `{"user_id": 1, "product_id": ` + pid + `, "hold": 5}`, `unknown field "hold"`},
		{"product: duplicate key", "/api/products", `{"id": ` + pid + `, "stock": 5, "stock": 500}`, `duplicate key "stock"`},
		{"product: wrong case", "/api/products", `{"ID": ` + pid + `, "stock": 5}`, `unknown field "ID"`},
		{"run: duplicate key", "/api/runs", `{"lock": "token", "lock": "none"}`, `duplicate key "lock"`},
		{"run: wrong case", "/api/runs", `{"Lock": "none"}`, `unknown field "Lock"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ae api.Error
			if st := e.do("POST", tc.path, tc.body, &ae); st != http.StatusBadRequest || ae.Code != api.CodeBadRequest || !strings.Contains(ae.Error, tc.want) {
				t.Errorf("got %d %+v, want 400 bad_request with %q", st, ae, tc.want)
			}
		})
	}
	if a := e.audit(id); a.Orders != 0 || a.Initial != 10 {
		t.Errorf("refused bodies changed the product: %+v", a)
	}
}

func TestBodiesMustBeSentAsJSON(t *testing.T) {
	e := startDefault(t)
	id := e.reset(product{"stock": 10})
	body := fmt.Sprintf(`{"user_id": 1, "product_id": %d}`, id)
	post := func(contentType string) (int, api.Error) {
		req, _ := http.NewRequest("POST", e.url+"/api/orders", strings.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		var ae api.Error
		return e.send(req, &ae), ae
	}
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx"} {
		if st, ae := post(ct); st != http.StatusUnsupportedMediaType || ae.Code != api.CodeUnsupportedMediaType || !strings.Contains(ae.Error, "application/json") {
			t.Errorf("Content-Type %q: %d %+v, want 415 unsupported_media_type", ct, st, ae)
		}
	}
	if a := e.audit(id); a.Orders != 0 {
		t.Fatalf("a refused body sold: %+v", a)
	}
	if st, ae := post("Application/JSON; charset=utf-8"); st != http.StatusCreated {
		t.Errorf("JSON with a charset: %d %+v, want 201", st, ae)
	}
}

func TestZeroShardsIsRefused(t *testing.T) {
	e := startDefault(t)
	var ae api.Error
	if st := e.do("POST", "/api/products", product{"id": testenv.ProductID(t), "stock": 5, "shards": 0}, &ae); st != http.StatusBadRequest || !strings.Contains(ae.Error, "shards must be between 1 and 64") {
		t.Errorf("shards 0: %d %+v, want 400 naming shards", st, ae)
	}
	id := e.reset(product{"stock": 5}) // no shards: the default
	var v api.ProductView
	if st := e.do("GET", fmt.Sprintf("/api/products/%d", id), nil, &v); st != http.StatusOK || len(v.Shards) != api.DefaultShards {
		t.Errorf("absent shards: %d, %d shards, want %d", st, len(v.Shards), api.DefaultShards)
	}
}

func TestPathIDsArePlainDigits(t *testing.T) {
	e := startDefault(t)
	id := e.reset(product{"stock": 5})
	for _, path := range []string{
		fmt.Sprintf("/api/products/+%d", id), fmt.Sprintf("/api/products/+%d/audit", id), "/api/products/05x",
		"/api/products/-1", "/api/orders/+1", "/api/orders/1e3", "/api/orders/%201",
	} {
		var ae api.Error
		if st := e.do("GET", path, nil, &ae); st != http.StatusBadRequest || ae.Code != api.CodeBadRequest || !strings.Contains(ae.Error, "decimal digits") {
			t.Errorf("GET %s: %d %+v, want 400 bad_request", path, st, ae)
		}
	}
	if st := e.do("GET", fmt.Sprintf("/api/products/%d", id), nil, nil); st != http.StatusOK {
		t.Errorf("GET the product by its digits: %d", st)
	}
}

// TestHeadersOver64KiB goes through the service's real listener: the bound
// is http.Server's, not the handler's.
func TestHeadersOver64KiB(t *testing.T) {
	e := startDefault(t)
	get := func(n int) int {
		req, _ := http.NewRequest("GET", e.url+"/api/locks", nil)
		req.Header.Set("X-Padding", strings.Repeat("x", n))
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatalf("GET with %d bytes of header: %v", n, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := get(60 << 10); st != http.StatusOK {
		t.Errorf("60 KiB of headers: %d, want 200", st)
	}
	if st := get(server.MaxHeaderBytes + 8<<10); st != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("72 KiB of headers: %d, want 431", st)
	}
}

// TestSlowBodyIsTimeout sends half a body and stops: the answer is a 408
// saying so, not a dropped connection.
func TestSlowBodyIsTimeout(t *testing.T) {
	e := serve(t, server.Deps{BodyTimeout: 100 * time.Millisecond})
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"user_id": 1, "product_id": 1}`
	fmt.Fprintf(conn, "POST /api/orders HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:10])
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), `"code":"timeout"`) || !strings.Contains(string(b), "did not arrive in time") {
		t.Errorf("stalled body: %d %s, want 408 timeout with a message", resp.StatusCode, b)
	}
	if !resp.Close {
		t.Errorf("the 408 does not say Connection: close (headers %v)", resp.Header)
	}
	// The rest of the body would be read as the next request: the server
	// must close the connection, not just say so. The test's side stays
	// open and silent; only the server can end it.
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("after the 408 the connection gave %v, want it closed by the server (EOF)", err)
	}
}

// TestUnroutedMethodsAre405: no method the API does not route reaches a
// handler, not even the page's file server, which answers any method.
func TestUnroutedMethodsAre405(t *testing.T) {
	e := serve(t, server.Deps{Web: fstest.MapFS{"index.html": {Data: []byte("<title>lab</title>")}}})
	for _, tc := range []struct{ method, path string }{
		{"TRACE", "/"}, {"TRACE", "/api/orders"}, {"OPTIONS", "/api/orders"}, {"PUT", "/api/products"},
		{"DELETE", "/index.html"}, {"PATCH", "/healthz"}, {"BREW", "/"},
	} {
		req, _ := http.NewRequest(tc.method, e.url+tc.path, nil)
		var ae api.Error
		if st := e.send(req, &ae); st != http.StatusMethodNotAllowed || ae.Code != api.CodeBadRequest {
			t.Errorf("%s %s: %d %+v, want 405", tc.method, tc.path, st, ae)
		}
	}
	resp, err := e.client.Head(e.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HEAD /: %d, want the page's 200", resp.StatusCode)
	}
}

// TestMetricLabelsAreBounded: a client inventing methods and paths adds no
// series to /metrics.
func TestMetricLabelsAreBounded(t *testing.T) {
	e := serve(t, server.Deps{})
	size := func() int {
		resp, err := e.client.Get(e.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return len(b)
	}
	invent := func(from, to int) {
		for i := from; i < to; i++ {
			req, _ := http.NewRequest(fmt.Sprintf("M%05d", i), fmt.Sprintf("%s/nowhere/%d", e.url, i), nil)
			resp, err := e.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	invent(0, 1) // the one "other" series
	size()       // and /metrics' own
	before := size()
	invent(1, 5001)
	if after := size(); after-before > 1<<10 {
		t.Errorf("/metrics grew from %d to %d bytes over 5,000 invented methods and paths", before, after)
	}
}

func TestForeignOriginsMayNotChangeAnything(t *testing.T) {
	cfg := testenv.Config(t)
	cfg.AllowedOrigins = []string{"https://lab.example.com/"}
	e := start(t, cfg)
	id := e.reset(product{"stock": 10})
	buy := func(user int, origin string) (int, api.Error) {
		req, _ := http.NewRequest("POST", e.url+"/api/orders", strings.NewReader(fmt.Sprintf(`{"user_id": %d, "product_id": %d}`, user, id)))
		req.Header.Set("Content-Type", "application/json")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		var ae api.Error
		return e.send(req, &ae), ae
	}
	for _, origin := range []string{"http://evil.example", "null", e.url + ".evil.example", "https://" + strings.TrimPrefix(e.url, "http://")} {
		if st, ae := buy(1, origin); st != http.StatusForbidden || ae.Code != api.CodeForbiddenOrigin {
			t.Errorf("Origin %s: %d %+v, want 403 forbidden_origin", origin, st, ae)
		}
	}
	if a := e.audit(id); a.Orders != 0 {
		t.Fatalf("a refused origin bought: %+v", a)
	}
	for user, origin := range []string{"", e.url, "HTTPS://LAB.EXAMPLE.COM"} {
		if st, ae := buy(user+1, origin); st != http.StatusCreated {
			t.Errorf("Origin %q: %d %+v, want 201", origin, st, ae)
		}
	}
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/products/%d", e.url, id), nil)
	req.Header.Set("Origin", "http://evil.example")
	if st := e.send(req, nil); st != http.StatusOK {
		t.Errorf("a read from another origin: %d, want 200", st)
	}
}

// TestHealthNamesTheBackendNotTheCause: the address and the driver's words
// go to the log; the answer says which backend did not answer.
func TestHealthNamesTheBackendNotTheCause(t *testing.T) {
	for _, tc := range []struct {
		down error
		want string
	}{
		{server.ErrRedisDown, "redis did not answer"},
		{server.ErrDatabaseDown, "the database did not answer"},
	} {
		cause := errors.New("dial tcp 10.9.8.7:3306: connect: Access denied for user 'root'")
		e := serve(t, server.Deps{Health: func(context.Context) (api.Health, error) {
			return api.Health{}, fmt.Errorf("%w: %w", tc.down, cause)
		}})
		resp, err := e.client.Get(e.url + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), tc.want) ||
			strings.Contains(string(b), "10.9.8.7") || strings.Contains(string(b), "denied") {
			t.Errorf("%v: %d %s, want 503 saying %q and nothing of the cause", tc.down, resp.StatusCode, b, tc.want)
		}
	}
}

// TestRebindingHostIsRefused: a page whose name was rebound to the
// service's loopback address sends Host and Origin both its own name, which
// the origin check takes for the service's; the Host check refuses it before
// any handler, for a purchase as for a product's creation.
func TestRebindingHostIsRefused(t *testing.T) {
	cfg := testenv.Config(t)
	cfg.AllowedHosts = []string{"shop.example"}
	e := start(t, cfg)
	id := e.reset(product{"stock": 10})
	_, port, err := net.SplitHostPort(strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	post := func(path, host string, body any) (int, api.Error) {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("POST", e.url+path, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		if e.token != "" {
			req.Header.Set("Authorization", "Bearer "+e.token)
		}
		if host != "" {
			req.Host = host
			req.Header.Set("Origin", "http://"+host)
		}
		var ae api.Error
		return e.send(req, &ae), ae
	}
	fresh := testenv.ProductID(t)
	for _, host := range []string{"evil.example", "evil.example:" + port, "EVIL.example:" + port, "localhost.evil.example:" + port} {
		if st, ae := post("/api/orders", host, map[string]any{"user_id": 1, "product_id": id}); st != http.StatusMisdirectedRequest || ae.Code != api.CodeUnknownHost {
			t.Errorf("a purchase under Host %s: %d %+v, want 421 unknown_host", host, st, ae)
		}
		if st, ae := post("/api/products", host, product{"id": fresh, "stock": 5}); st != http.StatusMisdirectedRequest || ae.Code != api.CodeUnknownHost {
			t.Errorf("a product created under Host %s: %d %+v, want 421 unknown_host", host, st, ae)
		}
	}
	if a := e.audit(id); a.Orders != 0 {
		t.Errorf("a refused Host bought: %+v", a)
	}
	var ae api.Error
	if st := e.do("GET", fmt.Sprintf("/api/products/%d", fresh), nil, &ae); st != http.StatusNotFound {
		t.Errorf("the product a refused Host created: %d %+v, want 404", st, ae)
	}
	for user, host := range []string{"", "127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port, "shop.example", "Shop.Example:8443"} {
		if st, ae := post("/api/orders", host, map[string]any{"user_id": user + 1, "product_id": id}); st != http.StatusCreated {
			t.Errorf("a purchase under Host %q: %d %+v, want 201", host, st, ae)
		}
	}
}

// TestHostsBeyondLoopback: a service bound to every interface with no
// ALLOWED_HOSTS serves any name on a non-loopback address (it says so at
// start), and still refuses a foreign name on loopback, which is where a
// rebound name leads a browser on the same machine.
func TestHostsBeyondLoopback(t *testing.T) {
	var outside string
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			outside = n.IP.String()
			break
		}
	}
	if outside == "" {
		t.Skip("this machine has no non-loopback IPv4 address to reach the service on")
	}
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(server.New(server.Deps{ListenAddr: "0.0.0.0:0"}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	get := func(addr, host string) int {
		req, _ := http.NewRequest("GET", "http://"+net.JoinHostPort(addr, port)+"/api/no-such-route", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := get(outside, "seckill:8080"); st != http.StatusNotFound {
		t.Errorf("a container's name on %s: %d, want it served (404 for the route)", outside, st)
	}
	if st := get("127.0.0.1", "evil.example:"+port); st != http.StatusMisdirectedRequest {
		t.Errorf("a foreign name on loopback: %d, want 421", st)
	}
}

// TestBadNamesAndIDsAre400: a product name is UTF-8 text without control
// characters, and an id is positive, everywhere a body carries one.
func TestBadNamesAndIDsAre400(t *testing.T) {
	e := startDefault(t)
	for _, name := range []string{`"a\u0000b"`, `"bell\u0007"`, `"esc\u001b[31m"`, `"del\u007f"`, `"c1\u0085"`, "\"bad \xff byte\"", `"lone \udc00"`} {
		id := testenv.ProductID(t)
		body := fmt.Sprintf(`{"id": %d, "stock": 5, "name": %s}`, id, name)
		var ae api.Error
		if st := e.do("POST", "/api/products", body, &ae); st != http.StatusBadRequest || ae.Code != api.CodeBadRequest {
			t.Errorf("name %q: %d %+v, want 400 bad_request", name, st, ae)
		}
	}
	id := e.reset(product{"stock": 5, "name": "限量手机 ✓"})
	for _, tc := range []struct{ path, body string }{
		{"/api/orders/lookup", `{"product_id": -5, "ids": []}`},
		{"/api/orders/lookup", `{"product_id": 0, "ids": []}`},
		{"/api/orders/lookup", `{"ids": ["1"]}`},
		{"/api/orders/lookup", fmt.Sprintf(`{"product_id": %d, "ids": ["0"]}`, id)},
		{"/api/orders/lookup", fmt.Sprintf(`{"product_id": %d, "ids": ["-7"]}`, id)},
		{"/api/orders", fmt.Sprintf(`{"user_id": 0, "product_id": %d}`, id)},
		{"/api/orders", `{"user_id": 1, "product_id": -1}`},
		{"/api/products", `{"id": 0, "stock": 5}`},
		{"/api/products", `{"id": -3, "stock": 5}`},
	} {
		var ae api.Error
		if st := e.do("POST", tc.path, tc.body, &ae); st != http.StatusBadRequest || ae.Code != api.CodeBadRequest {
			t.Errorf("POST %s %s: %d %+v, want 400 bad_request", tc.path, tc.body, st, ae)
		}
	}
	var l api.Lookup
	if st := e.do("POST", "/api/orders/lookup", fmt.Sprintf(`{"product_id": %d, "ids": ["12345"]}`, id), &l); st != http.StatusOK || len(l.Missing) != 1 {
		t.Errorf("a good lookup: %d %+v, want 200 with the id missing", st, l)
	}
}

// lateListener's connections stall their second read (the body's, the
// headers having come in the first) for a while before reading: the process
// did not run (a paused instance) while the body sat in the kernel's buffer.
type lateListener struct {
	net.Listener
	stall time.Duration
}

func (l lateListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	return &lateConn{Conn: c, stall: l.stall}, err
}

type lateConn struct {
	net.Conn
	stall time.Duration
	reads int
}

func (c *lateConn) Read(p []byte) (int, error) {
	if c.reads++; c.reads == 2 {
		time.Sleep(c.stall) // the pause itself, not a wait for a condition
	}
	return c.Conn.Read(p)
}

// TestBodyThatArrivedInTimeIsRead: the body timeout judges when the body
// arrived, not when the handler got to read it. The client sends its body
// at once; the server reads it only after twice the timeout (as a paused
// instance would): it is read, not answered 408.
func TestBodyThatArrivedInTimeIsRead(t *testing.T) {
	const timeout = 100 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(server.New(server.Deps{BodyTimeout: timeout}))
	srv.Listener = lateListener{Listener: ln, stall: 2 * timeout}
	srv.Start()
	t.Cleanup(srv.Close)
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"product_id": 1, "ids": ["0"]}` // refused after its reading: a 400, not a 408
	fmt.Fprintf(conn, "POST /api/orders/lookup HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	// The headers alone first, so that the body is the server's second read.
	br := bufio.NewReader(conn)
	time.Sleep(timeout / 5) // the client's own pacing, well within the timeout
	io.WriteString(conn, body)
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "is not an order id") {
		t.Errorf("a body sent at once, read late: %d %s, want it read (400 for its order id 0)", resp.StatusCode, b)
	}
}
