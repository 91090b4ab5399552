package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/alicebob/miniredis/v2"

	"seckill/internal/admission"
	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/server"
	"seckill/internal/testkit"
	"seckill/internal/testkit/testenv"
)

// env is one service under test, spoken to over real HTTP.
type env struct {
	t      testing.TB
	url    string
	srv    *app.Server // nil when the handler is served alone
	client *http.Client
	token  string // sent as the bearer token when set
	buyer  string // a buyer's token, sent on the requests that are not the operator's when set
}

// as is e speaking for the buyer signed in by name.
func (e *env) as(name string) *env {
	e.t.Helper()
	c := *e
	c.buyer = testenv.SignIn(e.t, e.url, name).Token
	return &c
}

func start(t testing.TB, cfg app.Config) *env { return startWith(t, cfg, app.Extras{}) }

func startWith(t testing.TB, cfg app.Config, extras app.Extras) *env {
	t.Helper()
	srv := testenv.Start(t, cfg, extras)
	return &env{t: t, url: srv.URL, srv: srv, client: newClient(), token: srv.Config.AdminToken}
}

// serve serves a handler built from deps alone, without backends: enough
// for what the edge refuses before a handler reaches them.
func serve(t *testing.T, deps server.Deps) *env {
	t.Helper()
	srv := httptest.NewServer(server.New(deps))
	t.Cleanup(srv.Close)
	return &env{t: t, url: srv.URL, client: newClient(), token: deps.AdminToken}
}

func newClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
}

func startDefault(t testing.TB) *env { return start(t, testenv.Config(t)) }

// do sends a request and decodes the JSON answer into out (when not nil).
func (e *env) do(method, path string, body any, out any) int {
	e.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		r = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, e.url+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.token != "" && operator(method, path) {
		req.Header.Set("Authorization", "Bearer "+e.token)
	} else if e.buyer != "" {
		req.Header.Set("Authorization", "Bearer "+e.buyer)
	}
	return e.send(req, out)
}

// operator reports whether a request is the operator's (it needs the
// token); buyers' requests are sent without it.
func operator(method, path string) bool {
	return path == "/api/class/answers" ||
		method == http.MethodPost && (path == "/api/products" || path == "/api/runs" || path == "/api/accounts/bulk" || strings.HasSuffix(path, "/reconcile"))
}

// send sends req and decodes the JSON answer into out (when not nil).
func (e *env) send(req *http.Request, out any) int {
	e.t.Helper()
	method, path := req.Method, req.URL.Path
	var sentBody []byte
	if req.GetBody != nil {
		if b, err := req.GetBody(); err == nil {
			sentBody, _ = io.ReadAll(b)
		}
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Errorf("%s %s: %v", method, path, err)
		return 0
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Errorf("%s %s: reading the body: %v", method, path, err)
	} else {
		checkContract(e.t, req, sentBody, resp.StatusCode, resp.Header, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			e.t.Errorf("%s %s: decoding %q: %v", method, path, data, err)
		}
	}
	return resp.StatusCode
}

type product map[string]any

// reset creates a product with a fresh id and returns the id.
func (e *env) reset(p product) int64 {
	e.t.Helper()
	id := testenv.ProductID(e.t)
	p["id"] = id
	if _, ok := p["lab"]; !ok {
		p["lab"] = true // the tests switch lock and mode per request, as the lab does
	}
	if st := e.do("POST", "/api/products", p, nil); st != http.StatusOK {
		e.t.Fatalf("resetting product %v: status %d", p, st)
	}
	e.t.Cleanup(func() { testenv.DropProductKeys(e.t, e.srv.RedisAddr(), id) })
	return id
}

// audit reads a product's audit, less the sale and the reconciler's pass,
// so that the tests compare the counts.
func (e *env) audit(id int64) api.Audit {
	e.t.Helper()
	var a api.Audit
	if st := e.do("GET", fmt.Sprintf("/api/products/%d/audit", id), nil, &a); st != http.StatusOK {
		e.t.Fatalf("audit of %d: status %d", id, st)
	}
	a.Sale, a.Reconciled, a.Shards = 0, nil, nil
	a.Unpaid, a.Paid, a.Cancelled = 0, 0, 0
	// Told is a lower bound that reaches Redis within a fraction of a
	// second: only its excess over the rows matters here.
	if a.Told > a.Orders+a.Queued+a.DeadLettered {
		e.t.Errorf("audit of %d: told of %d orders, %d stored", id, a.Told, a.Orders+a.Queued+a.DeadLettered)
	}
	a.Told = 0
	return a
}

// outcome is one buyer's answer: the status and, on error, the code.
type outcome struct {
	status int
	code   string
}

// rush releases one request per buyer at the same instant (they all wait on
// one channel) and returns each buyer's outcome.
func (e *env) rush(buyers int, body func(user int) map[string]any) []outcome {
	e.t.Helper()
	out := make([]outcome, buyers)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range buyers {
		wg.Go(func() {
			<-gate
			var ae api.Error
			out[i].status = e.do("POST", "/api/orders", body(i+1), &ae)
			out[i].code = ae.Code
		})
	}
	close(gate)
	wg.Wait()
	return out
}

func count(os []outcome, status int, code string) int {
	n := 0
	for _, o := range os {
		if o.status == status && (code == "" || o.code == code) {
			n++
		}
	}
	return n
}

func TestOversellWithoutLock(t *testing.T) {
	e := startDefault(t)
	id := e.reset(product{"stock": 50, "shards": 5, "lock": "none", "mode": "rmw"})
	got := e.rush(200, func(u int) map[string]any {
		return map[string]any{"user_id": u, "product_id": id, "hold_ms": 2}
	})
	a := e.audit(id)
	if a.Oversold <= 0 || a.Verdict != api.VerdictOversold {
		t.Errorf("audit %+v: want an oversell with no lock", a)
	}
	if created := count(got, http.StatusCreated, ""); created != a.Orders {
		t.Errorf("%d buyers got 201 but the database holds %d orders", created, a.Orders)
	}
}

func TestEveryBuyerGetsExactlyTheStock(t *testing.T) {
	// Every mode of the table: the locked ones under locks that exclude
	// across processes (and rmw under each kind of them, and one that
	// excludes within this process), the others under none.
	type run struct{ lock, mode string }
	var runs []run
	for _, m := range order.Modes() {
		switch {
		case m.Name == api.ModeRMW:
			runs = append(runs, run{"token", m.Name}, run{"local", m.Name}, run{"mysql", m.Name}, run{"etcd", m.Name})
		case m.Locked:
			runs = append(runs, run{"token", m.Name})
		default:
			runs = append(runs, run{"none", m.Name})
		}
	}
	for _, tc := range runs {
		t.Run(tc.lock+"/"+tc.mode, func(t *testing.T) {
			if tc.lock == "mysql" {
				testenv.RequireReal(t)
			}
			cfg := testenv.Config(t)
			if tc.mode == api.ModeMQ {
				url := os.Getenv("RABBITMQ_URL")
				if url == "" {
					testkit.Skip(t, testkit.NoRabbitMQ, "RABBITMQ_URL is not set: the mq mode needs RabbitMQ, which a bare machine lacks")
				}
				cfg.RabbitMQURL = url
				testenv.DeleteQueueAfter(t, cfg)
			}
			if tc.lock == "etcd" || tc.lock == "mysql" {
				// 40 buyers queue per shard, and etcd's Mutex hands the lock
				// on through a watch the server serves up to 100ms late
				// (docs/BENCHMARKS.md); MySQL's GET_LOCK queues them on a
				// database round trip each, which a loaded machine (CI under
				// the race detector) stretches: the last of them would
				// outwait the default 5s (seen: 6 of 200 answered
				// lock_timeout). This test is about the count, not the speed.
				cfg.LockWait = 30 * time.Second
			}
			e := start(t, cfg)
			id := e.reset(product{"stock": 50, "shards": 5, "lock": tc.lock, "mode": tc.mode})
			got := e.rush(200, func(u int) map[string]any {
				return map[string]any{"user_id": u, "product_id": id, "hold_ms": 2}
			})
			sold := http.StatusCreated
			if slices.Contains(order.QueuedModes(), tc.mode) {
				sold = http.StatusAccepted
			}
			if n := count(got, sold, ""); n != 50 {
				t.Errorf("%d buyers got %d, want 50; outcomes: %v", n, sold, got)
			}
			if n := count(got, http.StatusConflict, "sold_out"); n != 150 {
				t.Errorf("%d buyers got 409 sold_out, want 150; outcomes: %v", n, got)
			}
			// The queued modes' rows are written by their consumer.
			var a api.Audit
			e.eventually("every queued order written", func() bool { a = e.audit(id); return a.Orders >= 50 && a.Queued == 0 })
			want := api.Audit{ProductID: id, Initial: 50, Remaining: 0, Taken: 50, Orders: 50, Verdict: api.VerdictOK}
			if !reflect.DeepEqual(a, want) {
				t.Errorf("audit = %+v, want %+v", a, want)
			}
		})
	}
}

func TestShardFallback(t *testing.T) {
	e := startDefault(t)
	id := e.reset(product{"stock": 7, "shards": 5, "lock": "token"})
	e.rush(100, func(u int) map[string]any { return map[string]any{"user_id": u, "product_id": id} })
	if a := e.audit(id); a.Orders != 7 || a.Remaining != 0 || a.Verdict != api.VerdictOK {
		t.Errorf("with fallback: audit %+v, want all 7 sold", a)
	}
}

func TestWithoutFallbackSoldOutWhileStockRemains(t *testing.T) {
	e := startDefault(t)
	// 7 over 5 shards is 2,2,1,1,1: round robin empties a 1-unit shard while
	// the 2-unit shards still hold stock.
	id := e.reset(product{"stock": 7, "shards": 5, "lock": "token", "fallback": false})
	for u := 1; u <= 7; u++ {
		var ae api.Error
		st := e.do("POST", "/api/orders", map[string]any{"user_id": u, "product_id": id}, &ae)
		if st == http.StatusCreated {
			continue
		}
		if st != http.StatusConflict || ae.Code != "sold_out" {
			t.Fatalf("buyer %d: status %d %+v, want 201 or 409 sold_out", u, st, ae)
		}
		if a := e.audit(id); a.Remaining == 0 {
			t.Fatalf("buyer %d was told sold out and nothing remains: %+v", u, a)
		} else {
			t.Logf("buyer %d told sold out while %d units remain: the lesson of fallback", u, a.Remaining)
		}
		return
	}
	t.Fatal("every buyer was served: round robin without fallback should have hit an empty shard")
}

func TestSameUserTwice(t *testing.T) {
	for _, mode := range []string{"rmw", "lua", "db"} {
		t.Run(mode, func(t *testing.T) {
			e := startDefault(t)
			id := e.reset(product{"stock": 10, "mode": mode})
			buy := map[string]any{"user_id": 42, "product_id": id}
			var o map[string]any
			if st := e.do("POST", "/api/orders", buy, &o); st != http.StatusCreated {
				t.Fatalf("first purchase: status %d", st)
			}
			before := e.audit(id)
			var ae api.Error
			if st := e.do("POST", "/api/orders", buy, &ae); st != http.StatusConflict || ae.Code != "already_bought" {
				t.Errorf("second purchase: status %d %+v, want 409 already_bought", st, ae)
			}
			if after := e.audit(id); !reflect.DeepEqual(after, before) {
				t.Errorf("stock changed by a refused purchase: before %+v, after %+v", before, after)
			}
		})
	}
}

func TestFailedOrderWriteGivesTheUnitBack(t *testing.T) {
	for _, mode := range []string{"rmw", "lua", "db"} {
		t.Run(mode, func(t *testing.T) {
			e := startDefault(t)
			id := e.reset(product{"stock": 5, "shards": 1, "mode": mode})
			db := e.srv.DB()
			trigger := "CREATE TRIGGER reject_orders BEFORE INSERT ON orders BEGIN SELECT RAISE(ABORT, 'rejected by the test'); END"
			if db.Dialector.Name() == "mysql" {
				trigger = "CREATE TRIGGER reject_orders BEFORE INSERT ON orders FOR EACH ROW SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'rejected by the test'"
			}
			if err := db.Exec(trigger).Error; err != nil {
				t.Fatalf("installing the trigger: %v", err)
			}
			var ae api.Error
			st := e.do("POST", "/api/orders", map[string]any{"user_id": 1, "product_id": id}, &ae)
			if st != http.StatusServiceUnavailable || ae.Code != "unavailable" {
				t.Errorf("purchase with a failing insert: status %d %+v, want 503 unavailable", st, ae)
			}
			want := api.Audit{ProductID: id, Initial: 5, Remaining: 5, Verdict: api.VerdictOK}
			if a := e.audit(id); !reflect.DeepEqual(a, want) {
				t.Errorf("after the failed write: audit %+v, want %+v (the unit back in its shard)", a, want)
			}
			if err := db.Exec("DROP TRIGGER reject_orders").Error; err != nil {
				t.Fatal(err)
			}
			// The buyer was forgotten too: the same user may now buy.
			if st := e.do("POST", "/api/orders", map[string]any{"user_id": 1, "product_id": id}, nil); st != http.StatusCreated {
				t.Errorf("purchase after the database recovered: status %d, want 201", st)
			}
		})
	}
}

func TestOrderIDTravelsAsString(t *testing.T) {
	e := startDefault(t)
	id := e.reset(product{"stock": 1})
	var raw map[string]json.RawMessage
	if st := e.do("POST", "/api/orders", map[string]any{"user_id": 9, "product_id": id}, &raw); st != http.StatusCreated {
		t.Fatalf("status %d", st)
	}
	var oid string
	if err := json.Unmarshal(raw["id"], &oid); err != nil {
		t.Fatalf("order id %s is not a JSON string: %v", raw["id"], err)
	}
	var got map[string]json.RawMessage
	if st := e.do("GET", "/api/orders/"+oid, nil, &got); st != http.StatusOK {
		t.Fatalf("GET /api/orders/%s: status %d", oid, st)
	}
	if string(got["id"]) != string(raw["id"]) {
		t.Errorf("GET returned id %s, POST %s", got["id"], raw["id"])
	}
}

func TestRateLimit(t *testing.T) {
	cfg := testenv.Config(t)
	cfg.RateLimit = time.Minute
	e := start(t, cfg)
	id := e.reset(product{"stock": 10})
	user := testenv.ProductID(t) // a user id no other test uses
	buy := map[string]any{"user_id": user, "product_id": id}
	if st := e.do("POST", "/api/orders", buy, nil); st != http.StatusCreated {
		t.Fatalf("first request: status %d", st)
	}
	var ae api.Error
	if st := e.do("POST", "/api/orders", buy, &ae); st != http.StatusTooManyRequests || ae.Code != "rate_limited" {
		t.Errorf("second request within the period: status %d %+v, want 429 rate_limited", st, ae)
	}
	e.srv.Redis().Del(context.Background(), admission.PerBuyerKey(user, id))
}

// startTwo starts two instances on one Redis and one database.
func startTwo(t *testing.T) (a, b *env) {
	cfg := testenv.Config(t)
	if cfg.MySQLDSN == "" {
		cfg.SQLitePath = t.TempDir() + "/shared.db"
	}
	a = start(t, cfg)
	cfg.RedisAddr = a.srv.RedisAddr()
	return a, start(t, cfg)
}

func TestResetReachesEveryInstance(t *testing.T) {
	a, b := startTwo(t)
	id := a.reset(product{"stock": 1, "shards": 1})
	if st := b.do("POST", "/api/orders", map[string]any{"user_id": 1, "product_id": id}, nil); st != http.StatusCreated {
		t.Fatalf("buying the last unit through b: status %d", st)
	}
	if st := b.do("POST", "/api/orders", map[string]any{"user_id": 2, "product_id": id}, nil); st != http.StatusConflict {
		t.Fatalf("b after selling out: status %d, want 409", st)
	}
	// b now holds a sold-out flag; a's reset must clear it.
	if st := a.do("POST", "/api/products", product{"id": id, "stock": 1, "shards": 1, "lab": true}, nil); st != http.StatusOK {
		t.Fatalf("reset through a: status %d", st)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := b.do("POST", "/api/orders", map[string]any{"user_id": 3, "product_id": id}, nil)
		if st == http.StatusCreated {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("b still refuses (status %d) after a's reset", st)
		}
		time.Sleep(10 * time.Millisecond) // poll: the notice crosses Redis pub/sub
	}
}

func TestBadInput(t *testing.T) {
	e := startDefault(t)
	id := e.reset(product{"stock": 10})
	pid := fmt.Sprint(id)
	for _, tc := range []struct {
		name, method, path string
		body               string
		status             int
		code, message      string
	}{
		{"malformed JSON", "POST", "/api/orders", `{"user_id": 1,`, 400, "bad_request", "malformed JSON"},
		{"empty body", "POST", "/api/orders", ``, 400, "bad_request", "empty body"},
		{"missing user", "POST", "/api/orders", `{"product_id": ` + pid + `}`, 400, "bad_request", "user_id is required"},
		{"zero user", "POST", "/api/orders", `{"user_id": 0, "product_id": ` + pid + `}`, 400, "bad_request", "positive integer"},
		{"negative product", "POST", "/api/orders", `{"user_id": 1, "product_id": -3}`, 400, "bad_request", "positive integer"},
		{"id as string", "POST", "/api/orders", `{"user_id": "1", "product_id": ` + pid + `}`, 400, "bad_request", `"user_id" must be an integer`},
		{"fractional id", "POST", "/api/orders", `{"user_id": 1.5, "product_id": ` + pid + `}`, 400, "bad_request", `"user_id" must be an integer`},
		{"unknown field", "POST", "/api/orders", `{"user_id": 1, "product_id": ` + pid + `, "hold": 5}`, 400, "bad_request", `unknown field "hold"`},
		{"trailing data", "POST", "/api/orders", `{"user_id": 1, "product_id": ` + pid + `} {}`, 400, "bad_request", "after the JSON object"},
		{"unknown lock", "POST", "/api/orders", `{"user_id": 1, "product_id": ` + pid + `, "lock": "spinlock"}`, 400, "bad_request", `unknown strategy "spinlock"`},
		{"unknown mode", "POST", "/api/orders", `{"user_id": 1, "product_id": ` + pid + `, "mode": "cas"}`, 400, "bad_request", `unknown mode "cas"`},
		{"mode from the other store", "POST", "/api/orders", `{"user_id": 1, "product_id": ` + pid + `, "mode": "db"}`, 400, "bad_request", "keeps its stock in redis"},
		{"negative hold", "POST", "/api/orders", `{"user_id": 1, "product_id": ` + pid + `, "hold_ms": -1}`, 400, "bad_request", "hold_ms"},
		{"huge hold", "POST", "/api/orders", `{"user_id": 1, "product_id": ` + pid + `, "hold_ms": 3600000}`, 400, "bad_request", "hold_ms"},
		{"hold that overflows a duration", "POST", "/api/orders", `{"user_id": 1, "product_id": ` + pid + `, "hold_ms": 18446744073710}`, 400, "bad_request", "hold_ms"},
		{"clock skew beyond an hour", "POST", "/api/orders", `{"user_id": 1, "product_id": ` + pid + `, "clock_skew_ms": 9223372036854775807}`, 400, "bad_request", "clock_skew_ms"},
		{"no such product", "POST", "/api/orders", `{"user_id": 1, "product_id": 999999999999999}`, 404, "not_found", "product 999999999999999"},
		{"body too large", "POST", "/api/orders", `{"user_id": 1, "pad": "` + strings.Repeat("x", 70<<10) + `"}`, 413, "too_large", "larger than"},
		{"product path not a number", "GET", "/api/products/abc", ``, 400, "bad_request", "product id must be a positive integer"},
		{"product path zero", "GET", "/api/products/0/audit", ``, 400, "bad_request", "product id must be a positive integer"},
		{"product not found", "GET", "/api/products/999999999999999", ``, 404, "not_found", "product"},
		{"order path not a number", "GET", "/api/orders/12ab", ``, 400, "bad_request", "order id"},
		// Without a token, an order that does not exist is refused as a
		// product's that is not a lab product would be: no answer tells
		// whether it exists (TestStrangerCannotActAsAnotherBuyer).
		{"order not found", "GET", "/api/orders/12345", ``, 401, "sign_in_required", "sign in"},
		{"reset without stock", "POST", "/api/products", `{"id": 5}`, 400, "bad_request", "id and stock are required"},
		{"reset negative stock", "POST", "/api/products", `{"id": 5, "stock": -1}`, 400, "bad_request", "stock must be between"},
		{"reset too many shards", "POST", "/api/products", `{"id": 5, "stock": 1, "shards": 65}`, 400, "bad_request", "shards must be between"},
		{"reset unknown lock", "POST", "/api/products", `{"id": 5, "stock": 1, "lock": "spinlock"}`, 400, "bad_request", "spinlock"},
		{"unknown route", "GET", "/api/nothing", ``, 404, "not_found", "no such route"},
		{"unknown api route beside the page", "GET", "/api/nothing/here", ``, 404, "not_found", "no such route"},
		{"wrong method", "DELETE", "/api/orders", ``, 405, "bad_request", "method not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ae api.Error
			st := e.do(tc.method, tc.path, tc.body, &ae)
			if st != tc.status || ae.Code != tc.code || !strings.Contains(ae.Error, tc.message) {
				t.Errorf("got %d %+v, want %d %s containing %q", st, ae, tc.status, tc.code, tc.message)
			}
		})
	}
	if a := e.audit(id); a.Orders != 0 || a.Remaining != 10 {
		t.Errorf("bad requests changed the product: %+v", a)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	e := startDefault(t)
	var h api.Health
	if st := e.do("GET", "/healthz", nil, &h); st != http.StatusOK || h.Status != "ok" || h.Mode == "" || h.Redis == "" || h.SQL == "" {
		t.Fatalf("healthz: %d %+v, want status ok, mode, redis and sql", st, h)
	}
	id := e.reset(product{"stock": 1})
	var o map[string]any
	e.do("POST", "/api/orders", map[string]any{"user_id": 1, "product_id": id}, &o)
	e.do("GET", fmt.Sprintf("/api/orders/%v", o["id"]), nil, nil)
	resp, err := e.client.Get(e.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`seckill_http_requests_total{code="200",method="GET",route="/api/orders/:id"} 1`,
		`seckill_orders_total{lock="token",mode="rmw"} 1`,
		`seckill_lock_outcomes_total{lock="token",outcome="obtained"} 1`,
		`seckill_lock_wait_seconds_count{lock="token"} 1`,
		"seckill_queue_orders 0",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestLongHold keeps every holder in the critical section past its lease,
// in a live process (a slow call, not a pause of the process: see
// internal/lock's TestWatchdogPausedProcessLosesLock for that). Locks whose
// lease simply expires oversell; the watchdog keeps renewing the lease of a
// live holder, and fencing refuses the stale holder's write.
func TestLongHold(t *testing.T) {
	for _, tc := range []struct {
		lock     string
		oversell bool
	}{
		{"setnx-px", true},
		{"token", true},
		{"watchdog", false},
		{"fenced", false},
	} {
		t.Run(tc.lock, func(t *testing.T) {
			cfg := testenv.Config(t)
			cfg.LockTTL = 100 * time.Millisecond
			cfg.LockWait = 20 * time.Second
			e := start(t, cfg)
			id := e.reset(product{"stock": 3, "shards": 1, "lock": tc.lock})
			got := e.rush(8, func(u int) map[string]any {
				return map[string]any{"user_id": u, "product_id": id, "hold_ms": 300}
			})
			a := e.audit(id)
			t.Logf("audit %+v; 201s: %d, lease_lost: %d", a, count(got, http.StatusCreated, ""), count(got, http.StatusServiceUnavailable, "lease_lost"))
			if oversold := a.Verdict == api.VerdictOversold; oversold != tc.oversell {
				t.Errorf("verdict %s, want oversold=%v", a.Verdict, tc.oversell)
			}
			if !tc.oversell && (a.Verdict != api.VerdictOK || a.Orders+a.Remaining != a.Initial) {
				t.Errorf("audit %+v: want every unit either sold or in stock", a)
			}
			if created := count(got, http.StatusCreated, ""); created != a.Orders {
				t.Errorf("%d buyers got 201 but the database holds %d orders", created, a.Orders)
			}
		})
	}
}

func TestModesListTheTable(t *testing.T) {
	e := startDefault(t)
	var got []api.ModeInfo
	if st := e.do("GET", "/api/modes", nil, &got); st != http.StatusOK {
		t.Fatalf("status %d", st)
	}
	var names []string
	for _, m := range got {
		names = append(names, m.Name)
		if m.Short == "" || m.Promises == "" || m.Breaks == "" || !strings.HasPrefix(m.Test, "go test ") {
			t.Errorf("%s: %+v: the explanation lacks a text or its test", m.Name, m)
		}
	}
	if want := []string{"rmw", "lua", "db", "sqlrmw", "async", "mq"}; !slices.Equal(names, want) {
		t.Errorf("modes %v, want %v", names, want)
	}
}

func TestLocksListTheLadder(t *testing.T) {
	e := startDefault(t)
	var got []struct {
		Name, Fixes, Breaks string
		Commands            []string
	}
	if st := e.do("GET", "/api/locks", nil, &got); st != http.StatusOK {
		t.Fatalf("status %d", st)
	}
	want := []string{"none", "local", "setnx", "setnx-expire", "getset", "lua-setnx", "setnx-px",
		"token", "reentrant", "watchdog", "redlock", "fenced", "etcd", "mysql"}
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
		if s.Breaks == "" {
			t.Errorf("%s: the explanation lacks what it breaks", s.Name)
		}
		if sendsNothing := s.Name == "none" || s.Name == "local"; sendsNothing != (len(s.Commands) == 0) {
			t.Errorf("%s: commands %q", s.Name, s.Commands)
		}
	}
	if !slices.Equal(names, want) {
		t.Errorf("ladder %v, want %v", names, want)
	}
}

// TestRedisGoneIs503: with Redis unreachable a purchase, a read and the
// health check answer 503, never 500, and the database gains no order.
func TestRedisGoneIs503(t *testing.T) {
	mr := miniredis.RunT(t)
	cfg := testenv.Config(t)
	cfg.RedisAddr = mr.Addr()
	e := start(t, cfg)
	id := e.reset(product{"stock": 5})
	mr.Close()
	var ae api.Error
	if st := e.do("POST", "/api/orders", map[string]any{"user_id": 1, "product_id": id}, &ae); st != http.StatusServiceUnavailable || ae.Code != "unavailable" {
		t.Errorf("purchase without Redis: %d %+v, want 503 unavailable", st, ae)
	}
	if st := e.do("GET", fmt.Sprintf("/api/products/%d", id), nil, &ae); st != http.StatusServiceUnavailable {
		t.Errorf("product read without Redis: %d, want 503", st)
	}
	if st := e.do("GET", "/healthz", nil, &ae); st != http.StatusServiceUnavailable || ae.Error != "redis did not answer" {
		t.Errorf("healthz without Redis: %d %+v, want 503 naming redis and no address", st, ae)
	}
	var orders int64
	if err := e.srv.DB().Table("orders").Where("product_id = ?", id).Count(&orders).Error; err != nil || orders != 0 {
		t.Errorf("orders written without Redis: %d (%v)", orders, err)
	}
	if err := mr.Restart(); err != nil { // back, on the same address, for the clean-up
		t.Fatal(err)
	}
}

// ETCD_ENDPOINTS naming nothing that answers: the service starts (only the
// etcd strategy needs etcd), other locks sell, and a purchase under etcd
// answers 503 unavailable with a message within a few seconds.
func TestEtcdGoneIs503(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	cfg := testenv.Config(t)
	cfg.EtcdEndpoints = []string{dead}
	e := start(t, cfg)
	id := e.reset(product{"stock": 5, "shards": 1, "lock": "token"})
	if st := e.do("POST", "/api/orders", map[string]any{"user_id": 1, "product_id": id}, nil); st != http.StatusCreated {
		t.Errorf("purchase under token with etcd gone: %d, want 201", st)
	}
	var ae api.Error
	start := time.Now()
	st := e.do("POST", "/api/orders", map[string]any{"user_id": 2, "product_id": id, "lock": "etcd"}, &ae)
	if took := time.Since(start); st != http.StatusServiceUnavailable || ae.Code != "unavailable" || !strings.Contains(ae.Error, "etcd") || took > 3*lock.EtcdStep {
		t.Errorf("purchase under etcd with etcd gone: %d %+v after %s, want 503 unavailable naming etcd within %s", st, ae, took, 3*lock.EtcdStep)
	}
	if a := e.audit(id); a.Remaining != 4 || a.Orders != 1 {
		t.Errorf("audit %+v: want 4 left and the one order under token", a)
	}
}

func TestUnknownAPIRouteBesideThePageIsJSON(t *testing.T) {
	page := fstest.MapFS{"index.html": {Data: []byte("<!doctype html><title>lab</title>")}}
	e := startWith(t, testenv.Config(t), app.Extras{Web: page})
	var ae api.Error
	if st := e.do("GET", "/api/nothing", nil, &ae); st != http.StatusNotFound || ae.Code != "not_found" {
		t.Errorf("/api/nothing: %d %+v, want a JSON 404", st, ae)
	}
	resp, err := http.Get(e.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "<title>lab</title>") {
		t.Errorf("/: %d %q, want the page", resp.StatusCode, body)
	}
}
