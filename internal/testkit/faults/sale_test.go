package faults_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/catalogue"
	"seckill/internal/idgen"
	"seckill/internal/order"
	"seckill/internal/stock"
	"seckill/internal/testkit"
	"seckill/internal/testkit/child"
	"seckill/internal/testkit/testenv"
)

// TestMain lets the test binary be a service instance or a Redis of a
// test's own (see child.Run): the tests start them as separate processes,
// which they can pause and kill whole.
func TestMain(m *testing.M) { child.Main(testkit.Summarize(m.Run), app.StartChild) }

// grace is the reconciler's grace in these tests: short, so that a test
// need not wait out a whole purchase's budget. A pass runs only on demand,
// after the burst, when no purchase is in flight any more.
const grace = 500 * time.Millisecond

// patience bounds every wait of these tests for something that must happen.
const patience = 30 * time.Second

func exe(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ownRedis starts a Redis of the test's own, in a process of its own.
func ownRedis(t *testing.T) *child.Redis {
	t.Helper()
	r, err := child.StartRedis(t.Context(), exe(t), t.TempDir(), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Kill() })
	t.Logf("a Redis of the test's own: %s on %s", r.Kind, r.Addr)
	return r
}

// config is the service's configuration on the Redis at redisAddr and the
// database dsn ("" for testenv's: REDIS_ADDR's server or an embedded one,
// MYSQL_DSN's or SQLite): the
// reconciler on demand only, with a short grace.
func config(t *testing.T, redisAddr, dsn string) app.Config {
	t.Helper()
	cfg := testenv.Config(t)
	if redisAddr != "" {
		cfg.RedisAddr = redisAddr
	}
	if dsn != "" {
		cfg.MySQLDSN = dsn
	}
	cfg.ReconcileEvery = 0
	cfg.ReconcileGrace = grace
	// The buyers' tokens are minted with it (token), for the numbered
	// buyers of products that are not lab products, who have accounts.
	cfg.SessionSecret = testenv.SessionSecret
	cfg.LockWait = 10 * time.Second
	return cfg
}

// childArgs are the service flags of a child instance on cfg.
func childArgs(cfg app.Config) []string {
	redis := []string{"-redis", cfg.RedisAddr}
	if len(cfg.RedisCluster) > 0 {
		// -redis= clears a REDIS_ADDR the child inherits: both is refused.
		redis = []string{"-redis=", "-redis-cluster", strings.Join(cfg.RedisCluster, ",")}
	}
	return append(redis, "-addr", "127.0.0.1:0", "-admin-token", cfg.AdminToken, "-mysql", cfg.MySQLDSN, "-sqlite", cfg.SQLitePath,
		"-rate-limit", "0", "-address-rate", "0", "-demo-stock", "0", "-lock-wait", cfg.LockWait.String(),
		"-reconcile-every", "0", "-reconcile-grace", cfg.ReconcileGrace.String(), "-claim-idle", cfg.ClaimIdle.String(),
		"-session-secret", cfg.SessionSecret, "-log-level", "error")
}

// startChild starts a service instance as a child process on cfg.
func startChild(t *testing.T, cfg app.Config) *child.Instance {
	t.Helper()
	in, err := child.StartInstance(t.Context(), exe(t), childArgs(cfg), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Kill() })
	return in
}

// sale is one product on sale, and what the test reads of it.
type sale struct {
	t       *testing.T
	urls    []string // the instances; the first lives to the end
	db      *gorm.DB
	rdb     redis.UniversalClient
	product int64
	client  *http.Client
	// hold, if set, is a pause inside the critical section of each of a
	// burst's purchases; reset then makes the product a lab product, the
	// only kind that takes one.
	hold time.Duration
}

func newSale(t *testing.T, srv *app.Server, urls ...string) *sale {
	t.Helper()
	s := &sale{t: t, urls: append([]string{srv.URL}, urls...), db: srv.DB(), rdb: srv.Redis(),
		product: testenv.ProductID(t), client: &http.Client{Timeout: 3 * time.Minute}}
	keepsAccounts(t, s.db, s.rdb, s.urls...)
	return s
}

// reset creates or resets the product. An async or mq product is a lab
// product: the Redis of these tests keeps nothing (no append-only file),
// on which only a lab product may answer 202 (see TestDurabilityDecides).
func (s *sale) reset(stockUnits int, lockName, mode string) {
	s.t.Helper()
	shards := 3
	lab := mode == api.ModeAsync || mode == api.ModeMQ || s.hold > 0
	req := api.ProductRequest{ID: &s.product, Stock: &stockUnits, Shards: &shards, Lock: lockName, Mode: mode, Lab: lab,
		Reset: true} // the operator's explicit reset: the lock and mode may change
	if status, body := s.operator(s.urls[0]+"/api/products", req); status != http.StatusOK {
		s.t.Fatalf("resetting product %d: %d %s", s.product, status, body)
	}
}

func (s *sale) post(url, key string, in any) (int, []byte) {
	s.t.Helper()
	status, body, err := post(context.Background(), s.client, url, key, in)
	if err != nil {
		s.t.Fatalf("POST %s: %v", url, err)
	}
	return status, body
}

// operator sends in to url as the operator: with the token testenv
// configures.
func (s *sale) operator(url string, in any) (int, []byte) {
	s.t.Helper()
	status, body, err := postAs(context.Background(), s.client, url, testenv.AdminToken, in)
	if err != nil {
		s.t.Fatalf("POST %s: %v", url, err)
	}
	return status, body
}

// post sends in to url with the idempotency key key, if any.
func post(ctx context.Context, c *http.Client, url, key string, in any) (int, []byte, error) {
	h := http.Header{}
	if key != "" {
		h.Set(api.HeaderIdempotencyKey, key)
	}
	return send(ctx, c, url, h, in)
}

// postAs sends in to url with the admin token token, if any.
func postAs(ctx context.Context, c *http.Client, url, token string, in any) (int, []byte, error) {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return send(ctx, c, url, h, in)
}

func send(ctx context.Context, c *http.Client, url string, h http.Header, in any) (int, []byte, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header = h
	req.Header.Set("Content-Type", api.MediaType)
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// outcome is what one client was told.
type outcome struct {
	user   int64
	status int    // 0: no answer came
	code   string // the error code of a refusal
	order  string // the order id told: a 201's or 202's, or a refusal's order_id
	final  bool   // a sold_out told as final (no "final": false)
	sent   time.Time
	at     time.Time // when the answer came
	err    error     // why no answer came
	// unsent: the purchase was never sent, its buyer's account not made
	// (token's marks go to the service's Redis).
	unsent bool
}

func (o outcome) String() string {
	if o.status == 0 {
		return fmt.Sprintf("user %d: no answer (%v)", o.user, o.err)
	}
	return fmt.Sprintf("user %d: %d %s order %q", o.user, o.status, o.code, o.order)
}

// buy sends one purchase of buyer user, signed in (a token minted for the
// id: see config), with the idempotency key key.
func buy(ctx context.Context, c *http.Client, url string, product, user int64, key string) outcome {
	return buyHeld(ctx, c, url, product, user, key, 0)
}

// buyHeld is buy with a pause of hold inside the critical section.
func buyHeld(ctx context.Context, c *http.Client, url string, product, user int64, key string, hold time.Duration) outcome {
	o := outcome{user: user, sent: time.Now()}
	h := http.Header{}
	if key != "" {
		h.Set(api.HeaderIdempotencyKey, key)
	}
	tok, err := token(url, user)
	if err != nil {
		o.err, o.unsent = err, true
		return o
	}
	h.Set("Authorization", "Bearer "+tok)
	status, body, err := send(ctx, c, url+"/api/orders", h, api.OrderRequest{ProductID: &product, HoldMS: hold.Milliseconds()})
	o.at = time.Now()
	if err != nil {
		o.err = err
		return o
	}
	o.status = status
	if status == http.StatusCreated || status == http.StatusAccepted {
		var ord api.Order
		o.err = json.Unmarshal(body, &ord)
		o.order = ord.ID
		return o
	}
	var e api.Error
	o.err = json.Unmarshal(body, &e)
	o.code, o.order = e.Code, e.OrderID
	o.final = e.Code == api.CodeSoldOut && (e.Final == nil || *e.Final)
	return o
}

func (s *sale) buy(user int64, key string) outcome {
	return buy(context.Background(), s.client, s.urls[0], s.product, user, key)
}

// burst is many buyers at once, one purchase each, spread over the
// instances in turn.
type burst struct {
	answered atomic.Int64
	sold     atomic.Int64 // answers 201: orders stored
	done     chan struct{}
	outs     []outcome
}

// burstUsers is the first user id of a burst's buyers; the tests' single
// buyers are below it.
const burstUsers = 1_000_000

// startBurst sends one purchase for each of users buyers, concurrency at a
// time.
func (s *sale) startBurst(users, concurrency int) *burst {
	b := &burst{done: make(chan struct{}), outs: make([]outcome, users)}
	base := int64(burstUsers)
	ids := make([]int64, users)
	for i := range ids {
		ids[i] = base + int64(i)
	}
	s.accounts(ids...)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= users {
					return
				}
				user := base + int64(i)
				b.outs[i] = buyHeld(context.Background(), s.client, s.urls[i%len(s.urls)], s.product, user, "burst-"+strconv.FormatInt(user, 10), s.hold)
				if b.outs[i].status == http.StatusCreated {
					b.sold.Add(1)
				}
				b.answered.Add(1)
			}
		})
	}
	go func() {
		wg.Wait()
		close(b.done)
	}()
	return b
}

// waitAnswered returns once n purchases of the burst have been answered.
func (b *burst) waitAnswered(t *testing.T, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d answers", n), func() bool { return b.answered.Load() >= int64(n) })
}

// wait returns what every client was told, once the burst is over.
func (b *burst) wait(t *testing.T) []outcome {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the burst did not end within 3 minutes")
	}
	return b.outs
}

// waitFor polls cond until it holds, within patience.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, patience)
		}
		time.Sleep(5 * time.Millisecond) // the poll interval
	}
}

// counts tallies the outcomes by status and code.
func counts(outs []outcome) map[string]int {
	m := make(map[string]int)
	for _, o := range outs {
		k := "no answer"
		if o.status != 0 {
			k = strconv.Itoa(o.status) + " " + o.code
		}
		m[k]++
	}
	return m
}

// reconcile runs the reconciler on demand until a pass leaves no take
// pending (the grace has passed for all of them).
func (s *sale) reconcile() api.Reconciliation {
	s.t.Helper()
	var r api.Reconciliation
	url := s.urls[0] + "/api/products/" + strconv.FormatInt(s.product, 10) + "/reconcile"
	waitFor(s.t, "a reconciliation with no take pending", func() bool {
		status, body := s.operator(url, struct{}{})
		if status != http.StatusOK {
			s.t.Logf("reconcile: %d %s", status, body)
			return false
		}
		r = api.Reconciliation{}
		if err := json.Unmarshal(body, &r); err != nil {
			s.t.Fatal(err)
		}
		return r.Pending == 0 && r.Error == ""
	})
	s.t.Logf("reconciled: %+v", r)
	return r
}

// state is the product as the stores hold it.
type state struct {
	p         catalogue.Product
	remaining int
	ledger    map[int64]stock.Entry    // the current layout's takes, by buyer
	buyers    int                      // buyer keys naming a take of the ledger
	orders    map[idgen.ID]order.Order // live orders of the current sale
	rows      map[idgen.ID]order.Order // every row of the product, void rows and past sales too
	byUser    map[int64][]order.Order  // live orders of the current sale, by user
}

func (s *sale) read() state {
	s.t.Helper()
	ctx := context.Background()
	st := state{rows: make(map[idgen.ID]order.Order), orders: make(map[idgen.ID]order.Order), byUser: make(map[int64][]order.Order)}
	if err := s.db.WithContext(ctx).Take(&st.p, s.product).Error; err != nil {
		s.t.Fatalf("reading product %d: %v", s.product, err)
	}
	var rows []order.Order
	if err := s.db.WithContext(ctx).Where("product_id = ?", s.product).Find(&rows).Error; err != nil {
		s.t.Fatalf("reading the orders: %v", err)
	}
	for _, o := range rows {
		st.rows[o.ID] = o
		if o.Live() && o.Sale == st.p.Sale {
			st.orders[o.ID] = o
			st.byUser[o.UserID] = append(st.byUser[o.UserID], o)
		}
	}
	layout := stock.Layout{ID: s.product, Shards: st.p.Shards, Epoch: st.p.Epoch}
	store := stock.NewStore(s.rdb, s.db)
	levels, err := store.Ledgers().Levels(ctx, stock.Product{Layout: layout, Where: stock.InRedis})
	if err != nil {
		s.t.Fatalf("reading the stock: %v", err)
	}
	for _, n := range levels {
		st.remaining += n
	}
	if st.ledger, err = store.Ledgers().Ledger(ctx, layout); err != nil {
		s.t.Fatalf("reading the ledger: %v", err)
	}
	for user, e := range st.ledger {
		// The buyer's key names the take: its record ("order key shard
		// millis"), or on a cluster the claim of the purchase that took
		// ("claim key millis order"), which stands as the record.
		f := strings.Fields(s.rdb.Get(ctx, layout.BuyerKey(user)).Val())
		id := e.Order.String()
		if len(f) > 0 && (f[0] == id || f[0] == "claim" && f[len(f)-1] == id) {
			st.buyers++
		}
	}
	return st
}

// checkPromise holds the sale's data to the promise: a unit is in the store
// or in an order, never both and never neither; every take in the ledger is
// an order, under its buyer; and every client told of an order (201, or 409
// already_bought with its id) was told of one that is stored. It returns
// the state it checked.
func (s *sale) checkPromise(outs []outcome) state {
	s.t.Helper()
	st := s.read()
	initial := st.p.Initial
	s.t.Logf("sale %d: initial %d, remaining %d, %d orders, %d takes; clients told %v",
		st.p.Sale, initial, st.remaining, len(st.orders), len(st.ledger), counts(outs))
	if st.remaining+len(st.orders) != initial {
		s.t.Errorf("%d units in the store and %d in orders, of %d: %d units lost", st.remaining, len(st.orders), initial,
			initial-st.remaining-len(st.orders))
	}
	if len(st.orders) > initial {
		s.t.Errorf("%d orders for %d units", len(st.orders), initial)
	}
	for user, e := range st.ledger {
		if o, ok := st.orders[e.Order]; !ok || o.UserID != user {
			s.t.Errorf("the take of user %d names order %s, which is not a live order of theirs in this sale", user, e.Order)
		}
	}
	if len(st.ledger) != len(st.orders) || st.buyers != len(st.ledger) {
		s.t.Errorf("%d takes in the ledger, %d of them under their buyer, for %d orders", len(st.ledger), st.buyers, len(st.orders))
	}
	for user, os := range st.byUser {
		if len(os) > 1 {
			s.t.Errorf("user %d has %d orders in this sale", user, len(os))
		}
	}
	for _, o := range outs {
		if o.status != http.StatusCreated && o.status != http.StatusAccepted && o.code != api.CodeAlreadyBought {
			continue
		}
		id, err := idgen.ParseID(o.order)
		row, ok := st.rows[id]
		if err != nil || !ok || !row.Live() || row.UserID != o.user {
			s.t.Errorf("%v: the client was told of an order that is not stored as theirs (%+v)", o, row)
		}
	}
	a := s.audit()
	if a.Verdict != api.VerdictOK || a.Unsettled != 0 || a.Orders != len(st.orders) || a.Remaining != st.remaining {
		s.t.Errorf("audit %+v: want OK, nothing unsettled, as the stores say", a)
	}
	return st
}

// get reads path on the first instance into out, and fails the test
// unless the answer is 200.
func (s *sale) get(path string, out any) {
	s.t.Helper()
	s.getAs(path, "", out)
}

// getAs is get for the buyer of token ("" for none).
func (s *sale) getAs(path, token string, out any) {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.urls[0]+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		s.t.Fatalf("GET %s: %d %s %v", path, resp.StatusCode, b, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		s.t.Fatalf("GET %s: %v", path, err)
	}
}

func (s *sale) audit() api.Audit {
	s.t.Helper()
	url := s.urls[0] + "/api/products/" + strconv.FormatInt(s.product, 10) + "/audit"
	var a api.Audit
	waitFor(s.t, "an audit", func() bool {
		resp, err := s.client.Get(url)
		if err != nil {
			s.t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable { // rebuilding
			return false
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			s.t.Fatalf("audit: %d %s", resp.StatusCode, b)
		}
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			s.t.Fatal(err)
		}
		return true
	})
	return a
}

// noAnswer returns the clients that were told nothing, or that the outcome
// is unknown: their purchase may or may not have become an order.
func noAnswer(outs []outcome) []outcome {
	var out []outcome
	for _, o := range outs {
		if o.status == 0 || o.code == api.CodeOutcomeUnknown || o.code == api.CodeUnavailable {
			out = append(out, o)
		}
	}
	return out
}

// checkStrandedCanBuy has every client that got no answer buy again, with
// a new key: each gets an order, or is told of the order it has.
func (s *sale) checkStrandedCanBuy(outs []outcome) {
	s.t.Helper()
	stranded := noAnswer(outs)
	var bought, had int
	for _, o := range stranded {
		again := s.buy(o.user, "again-"+strconv.FormatInt(o.user, 10))
		switch {
		case again.status == http.StatusCreated:
			bought++
		case again.code == api.CodeAlreadyBought:
			had++
		default:
			s.t.Errorf("%v; buying again: %v, want an order or the order they have", o, again)
		}
	}
	s.t.Logf("%d clients got no answer: %d bought again, %d had an order after all", len(stranded), bought, had)
}

func contains(body []byte, s string) bool { return bytes.Contains(body, []byte(s)) }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
