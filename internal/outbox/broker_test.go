package outbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/idgen"
	"seckill/internal/lab/harness"
	"seckill/internal/order"
	"seckill/internal/outbox"
	"seckill/internal/testkit"
	"seckill/internal/testkit/child"
	"seckill/internal/testkit/testenv"
)

// TestMQ holds every test of the mq mode: they need RabbitMQ, which a bare
// machine does not have, so that they skip as one.
func TestMQ(t *testing.T) {
	url := os.Getenv("RABBITMQ_URL")
	if url == "" {
		testkit.Skip(t, testkit.NoRabbitMQ, "RABBITMQ_URL is not set: the mq mode's tests need RabbitMQ (.ci/run installs and starts one)")
	}
	t.Run("Broker", func(t *testing.T) { testBroker(t, url) })
	t.Run("PurchaseToRow", func(t *testing.T) { testPurchaseToRow(t, url) })
	t.Run("ReconcilerWaitsForTheQueue", func(t *testing.T) { testReconcilerWaitsForTheQueue(t, url) })
	t.Run("VoidRowDropsTheOrder", func(t *testing.T) { testVoidRowDropsTheOrder(t, url) })
	t.Run("CrashAfterTake", func(t *testing.T) { testCrashAfterTake(t, url) })
	t.Run("UnconfirmedPublish", func(t *testing.T) { testUnconfirmedPublish(t, url) })
	t.Run("OnCluster", func(t *testing.T) { testOnCluster(t, url) })
}

// On a Redis Cluster of the test's own, the mq mode sells once per buyer
// and its orders reach their rows.
func testOnCluster(t *testing.T, url string) {
	c := testkit.NewRedisCluster(t)
	srv, product := service(t, url, func(cfg *app.Config) { cfg.RedisAddr, cfg.RedisCluster = "", c.Addrs() })
	createProduct(t, srv.URL, product, 5)
	var ids []string
	for user := int64(1); user <= 3; user++ {
		o, e, code := buy(t, srv.URL, product, user, false)
		if code != http.StatusAccepted || o.Mode != api.ModeMQ {
			t.Fatalf("buy: %d %+v %+v, want 202 mq", code, o, e)
		}
		ids = append(ids, o.ID)
	}
	if _, e, code := buy(t, srv.URL, product, 1, false); code != http.StatusConflict || e.OrderID != ids[0] {
		t.Errorf("buyer 1 again: %d %+v, want 409 with order %s", code, e, ids[0])
	}
	for _, id := range ids {
		poll(t, "order "+id+" written", func() bool {
			var o api.Order
			return send(t, http.MethodGet, srv.URL+"/api/orders/"+id, nil, &o) == http.StatusOK && o.Status == order.Unpaid
		})
	}
	if a := audit(t, srv.URL, product); a.Orders != 3 || a.Remaining != 2 || a.Taken != 3 || a.Verdict != api.VerdictOK {
		t.Errorf("audit %+v: want 3 orders, 2 left, OK", a)
	}
}

// A publish returns once confirmed; the depth counts what no consumer has
// taken; a subscription that closes without acknowledging hands its
// messages back, and one that acknowledges empties the queue.
func testBroker(t *testing.T, url string) {
	b, err := outbox.Dial(url, "seckill.test."+strconv.FormatInt(testenv.ProductID(t), 10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Delete(); b.Close() })
	ctx := t.Context()
	for i := range 3 {
		if err := b.Publish(ctx, strconv.Itoa(i), []byte(`{"n":`+strconv.Itoa(i)+`}`)); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	waitDepth(t, b, 3)

	sub, err := b.Subscribe(10)
	if err != nil {
		t.Fatal(err)
	}
	ds := next(t, sub, 3)
	waitDepth(t, b, 0) // delivered, not acknowledged
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	waitDepth(t, b, 3) // handed back

	sub, err = b.Subscribe(10)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ds = next(t, sub, 3)
	var bodies []string
	for _, d := range ds {
		bodies = append(bodies, string(d.Body))
	}
	if want := []string{`{"n":0}`, `{"n":1}`, `{"n":2}`}; !slices.Equal(bodies, want) {
		t.Errorf("delivered %q, want %q in order", bodies, want)
	}
	if err := sub.Ack(ds); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	waitDepth(t, b, 0)
}

// next takes n deliveries from sub, waiting for them.
func next(t *testing.T, sub *outbox.Subscription, n int) []outbox.Delivery {
	t.Helper()
	var ds []outbox.Delivery
	deadline := time.Now().Add(10 * time.Second)
	for len(ds) < n && time.Now().Before(deadline) {
		got, err := sub.Next(nil, n-len(ds), 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
	}
	if len(ds) != n {
		t.Fatalf("%d deliveries, want %d", len(ds), n)
	}
	return ds
}

func waitDepth(t *testing.T, b *outbox.Broker, want int) {
	t.Helper()
	var n int
	poll(t, fmt.Sprintf("queue depth %d", want), func() bool {
		var err error
		n, err = b.Depth(t.Context())
		return err == nil && n == want
	})
}

// poll calls ok until it is true, for 15s at most.
func poll(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 15s for %s", what)
		}
		<-tick.C
	}
}

// queueOnly runs no consumer, and the reconciler only on demand with a
// short grace period: the orders stay in the queue until the test says.
func queueOnly(c *app.Config) {
	c.Consume = false
	c.ReconcileGrace = 50 * time.Millisecond
	c.ReconcileEvery = 0
}

// service starts the service with a broker whose queue is the test's own.
func service(t *testing.T, url string, edit func(*app.Config)) (*app.Server, int64) {
	t.Helper()
	cfg := testenv.Config(t)
	cfg.RabbitMQURL = url
	if edit != nil {
		edit(&cfg)
	}
	testenv.DeleteQueueAfter(t, cfg)
	srv := testenv.Start(t, cfg, app.Extras{})
	product := testenv.ProductID(t)
	t.Cleanup(func() { testenv.DropProductKeys(t, srv.RedisAddr(), product) })
	return srv, product
}

// send makes a JSON request and decodes the answer into out (when not nil).
func send(t *testing.T, method, url string, in, out any) int {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if in != nil {
		req.Header.Set("Content-Type", api.MediaType)
	}
	if method == http.MethodPost && (strings.HasSuffix(url, "/api/products") || strings.HasSuffix(url, "/reconcile")) {
		req.Header.Set("Authorization", "Bearer "+testenv.AdminToken) // the operator's
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, url, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

func createProduct(t *testing.T, base string, id int64, stock int) {
	t.Helper()
	shards := 2
	req := api.ProductRequest{ID: &id, Stock: &stock, Shards: &shards, Mode: api.ModeMQ, Lab: true}
	if code := send(t, http.MethodPost, base+"/api/products", req, nil); code != http.StatusOK {
		t.Fatalf("creating product %d: %d", id, code)
	}
}

func buy(t *testing.T, base string, product, user int64, crash bool) (api.Order, api.Error, int) {
	t.Helper()
	var raw json.RawMessage
	code := send(t, http.MethodPost, base+"/api/orders", api.OrderRequest{UserID: &user, ProductID: &product, CrashAfterTake: crash}, &raw)
	var o api.Order
	var e api.Error
	json.Unmarshal(raw, &o)
	json.Unmarshal(raw, &e)
	return o, e, code
}

func audit(t *testing.T, base string, product int64) api.Audit {
	t.Helper()
	var a api.Audit
	if code := send(t, http.MethodGet, fmt.Sprintf("%s/api/products/%d/audit", base, product), nil, &a); code != http.StatusOK {
		t.Fatalf("audit: %d", code)
	}
	return a
}

func reconcile(t *testing.T, base string, product int64) api.Reconciliation {
	t.Helper()
	var r api.Reconciliation
	if code := send(t, http.MethodPost, fmt.Sprintf("%s/api/products/%d/reconcile", base, product), nil, &r); code != http.StatusOK {
		t.Fatalf("reconcile: %d %+v", code, r)
	}
	return r
}

// A purchase answers 202 once the broker confirmed; the consumer writes
// the order, which is then unpaid like any other; the audit is exact.
func testPurchaseToRow(t *testing.T, url string) {
	srv, product := service(t, url, nil)
	createProduct(t, srv.URL, product, 5)
	var ids []string
	for user := int64(1); user <= 3; user++ {
		o, e, code := buy(t, srv.URL, product, user, false)
		if code != http.StatusAccepted || o.Status != order.Pending || o.Mode != api.ModeMQ {
			t.Fatalf("buy: %d %+v %+v, want 202 pending mq", code, o, e)
		}
		ids = append(ids, o.ID)
	}
	for _, id := range ids {
		poll(t, "order "+id+" written", func() bool {
			var o api.Order
			return send(t, http.MethodGet, srv.URL+"/api/orders/"+id, nil, &o) == http.StatusOK && o.Status == order.Unpaid
		})
	}
	if a := audit(t, srv.URL, product); a.Orders != 3 || a.Remaining != 2 || a.Taken != 3 || a.Verdict != api.VerdictOK {
		t.Errorf("audit %+v: want 3 orders, 2 left, OK", a)
	}
	// Without a broker, the mode is refused.
	cfg := testenv.Config(t)
	plain := testenv.Start(t, cfg, app.Extras{})
	other := testenv.ProductID(t)
	t.Cleanup(func() { testenv.DropProductKeys(t, plain.RedisAddr(), other) })
	stock := 1
	var e api.Error
	code := send(t, http.MethodPost, plain.URL+"/api/products", api.ProductRequest{ID: &other, Stock: &stock, Lab: true}, nil)
	if code != http.StatusOK {
		t.Fatalf("creating product %d: %d", other, code)
	}
	user := int64(1)
	if code := send(t, http.MethodPost, plain.URL+"/api/orders", api.OrderRequest{UserID: &user, ProductID: &other, Mode: api.ModeMQ}, &e); code != http.StatusBadRequest {
		t.Errorf("an mq purchase without a broker: %d %+v, want 400", code, e)
	}
}

// While the queue holds messages, the reconciler leaves the mq takes
// alone, however old: their orders may be among them, and their buyers
// were told 202. Once a consumer has written them, nothing is stranded.
func testReconcilerWaitsForTheQueue(t *testing.T, url string) {
	srv, product := service(t, url, queueOnly)
	createProduct(t, srv.URL, product, 5)
	for user := int64(1); user <= 3; user++ {
		if _, e, code := buy(t, srv.URL, product, user, false); code != http.StatusAccepted {
			t.Fatalf("buy: %d %+v", code, e)
		}
	}
	waitDepth(t, srv.Broker(), 3)
	time.Sleep(100 * time.Millisecond) // past the grace period: a duration, not a condition
	r := reconcile(t, srv.URL, product)
	if r.Held != 3 || r.Pending != 3 || r.Returned != 0 || r.Queue != 3 {
		t.Errorf("reconciliation %+v: want the 3 takes held while the queue holds 3 messages", r)
	}
	c := order.NewMQConsumer(srv.DB(), srv.Orders, srv.Broker(), outbox.Options{})
	c.Start()
	t.Cleanup(func() { c.Close() })
	poll(t, "the orders written", func() bool { return audit(t, srv.URL, product).Orders == 3 })
	if r := reconcile(t, srv.URL, product); r.Returned != 0 || r.Pending != 0 || r.Held != 0 {
		t.Errorf("reconciliation %+v: want nothing pending, nothing returned", r)
	}
	if a := audit(t, srv.URL, product); a.Remaining != 2 || a.Verdict != api.VerdictOK {
		t.Errorf("audit %+v: want 3 orders, 2 left, OK", a)
	}
}

// An order whose id holds a void row (the reconciler settled it as never
// written, and its unit went back) is dropped by the consumer, its message
// acknowledged.
func testVoidRowDropsTheOrder(t *testing.T, url string) {
	srv, product := service(t, url, queueOnly)
	createProduct(t, srv.URL, product, 2)
	o, e, code := buy(t, srv.URL, product, 1, false)
	if code != http.StatusAccepted {
		t.Fatalf("buy: %d %+v", code, e)
	}
	id, err := idgen.ParseID(o.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The reconciler's void row, as if it had judged while the message was
	// at a consumer that stalled.
	now := time.Now()
	void := order.Order{ID: id, ProductID: product, Sale: o.Sale, UserID: 1, Shard: o.Shard, Lock: "none", Mode: api.ModeMQ,
		Status: order.Void, CreatedAt: now, AcceptedAt: &now}
	if err := srv.DB().WithContext(t.Context()).Create(&void).Error; err != nil {
		t.Fatal(err)
	}
	c := order.NewMQConsumer(srv.DB(), srv.Orders, srv.Broker(), outbox.Options{})
	c.Start()
	t.Cleanup(func() { c.Close() })
	poll(t, "the message consumed", func() bool {
		n, err := srv.Broker().Depth(t.Context())
		return err == nil && n == 0
	})
	if err := c.Close(); err != nil { // its batch is acknowledged, or handed back
		t.Fatal(err)
	}
	if n, err := srv.Broker().Depth(context.Background()); err != nil || n != 0 {
		t.Fatalf("after the consumer closed, the queue holds %d (%v): the void order's message was not acknowledged", n, err)
	}
	// Read by a signed-in buyer: without a session, an order that does not
	// exist is 401, as one of a product that is not a lab product would be.
	reader := testenv.SignIn(t, srv.URL, "void-reader")
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/api/orders/"+o.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+reader.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET the voided order: %d, want 404", resp.StatusCode)
	}
	// The take is still in the ledger: the reconciler returns its unit,
	// once the take is older than the grace period.
	var returned int
	poll(t, "the voided order's unit returned", func() bool {
		returned += reconcile(t, srv.URL, product).Returned
		return returned > 0
	})
	if r := reconcile(t, srv.URL, product); returned != 1 || r.Returned != 0 || r.Pending != 0 {
		t.Errorf("returned %d, then %+v: want the unit returned once", returned, r)
	}
	if a := audit(t, srv.URL, product); a.Orders != 0 || a.Remaining != 2 || a.Verdict != api.VerdictOK {
		t.Errorf("audit %+v: want no order, the stock whole, OK", a)
	}
}

// The crash-after-take scenario: LOST without the reconciler, an exact
// audit after it.
func testCrashAfterTake(t *testing.T, url string) {
	sc, err := harness.LookupScenario("crash-after-take")
	if err != nil {
		t.Fatal(err)
	}
	srv, product := service(t, url, func(c *app.Config) { c.ReconcileGrace = sc.ReconcileGrace })
	t.Cleanup(func() { testenv.DropProductKeys(t, srv.RedisAddr(), product+1) })
	rows, _, held, err := harness.RunScenario(t.Context(), sc, harness.ScenarioRun{Targets: []string{srv.URL}, ProductID: product,
		Override: func(s *harness.Spec) { s.AdminToken = testenv.AdminToken }})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		t.Logf("%s: %s (harness %s, audit %s, service %s), ok %d, errors %v, sold %d, lost updates %d; %v",
			r.Label(), r.Verdict, r.HarnessVerdict, r.AuditVerdict, r.ServiceVerdict, r.OK, r.ErrorCodes, r.Sold, r.LostUpdates, r.Disagreements)
	}
	if !held || len(rows) != 2 {
		t.Fatalf("the scenario's expectations did not hold")
	}
	lost, after := rows[0], rows[1]
	if lost.ServiceVerdict != api.VerdictLost || lost.LostUpdates != -10 || lost.ErrorCodes[api.CodeUnavailable] != 10 || lost.OK != 90 {
		t.Errorf("without the reconciler: %+v, want 10 units lost with the 10 purchases told unavailable", lost.RunResult)
	}
	if after.ServiceVerdict != api.VerdictOK || after.LostUpdates != 0 || after.Sold != 90 {
		t.Errorf("after the reconciler: %+v, want an exact audit, 90 orders", after.RunResult)
	}
	// The passes (one or more, until no take was pending) returned the 10.
	a := audit(t, srv.URL, product+1)
	if a.Initial != a.Remaining+a.Unpaid+a.Paid+a.Queued || a.Remaining != 10 || a.Reconciled == nil {
		t.Errorf("audit %+v: want initial = remaining + unpaid + paid + queued, the 10 units back, and the reconciler's pass", a)
	}
}

// A publish whose confirmation does not come (the broker's answers held by
// a proxy between the service and RabbitMQ, the publish itself through):
// the message is in the queue, so the purchase is told 503 outcome_unknown
// with its order id, and its unit stays out of the store, for the
// reconciler to settle once the queue is empty. Given back on a guess, the
// unit would be sold again beside the order the consumer then writes.
func testUnconfirmedPublish(t *testing.T, url string) {
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	p, err := child.StartProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	srv, product := service(t, u.String(), queueOnly)
	createProduct(t, srv.URL, product, 2)
	if _, e, code := buy(t, srv.URL, product, 1, false); code != http.StatusAccepted {
		t.Fatalf("buy before the hold: %d %+v", code, e)
	}
	p.Hold()
	_, e, code := buy(t, srv.URL, product, 2, false)
	p.Release()
	if code != http.StatusServiceUnavailable || e.Code != api.CodeOutcomeUnknown || e.OrderID == "" {
		t.Fatalf("a purchase whose publish was not confirmed: %d %+v; want 503 %s with the order id", code, e, api.CodeOutcomeUnknown)
	}
	waitDepth(t, srv.Broker(), 2) // the unconfirmed message is there
	if a := audit(t, srv.URL, product); a.Remaining != 0 {
		t.Errorf("audit %+v: want both units out of the store (the unconfirmed one's order is queued)", a)
	}
}
