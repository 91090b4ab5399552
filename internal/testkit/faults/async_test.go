package faults_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/idgen"
	"seckill/internal/order"
	"seckill/internal/stock"
	"seckill/internal/testkit"
)

// claimIdle is the consumers' claim idle in these tests: short, so that a
// dead consumer's orders are claimed within the test's patience.
const claimIdle = time.Second

// A service process SIGKILLed mid-drain, while its consumer holds queued
// orders delivered to it and not acknowledged: the living consumer claims
// them after the claim idle and writes them, once each. Every 202 has its
// row, no buyer has two, nothing is dead-lettered, and the audit is exact.
func TestAsyncConsumerKilledMidDrain(t *testing.T) {
	r := ownRedis(t)
	cfg := config(t, r.Addr, "")
	cfg.ClaimIdle = claimIdle
	if cfg.MySQLDSN == "" {
		cfg.SQLitePath = filepath.Join(t.TempDir(), "orders.db")
	}
	srv := start(t, cfg, app.Extras{})
	in := startChild(t, cfg) // a consumer only: every purchase goes to srv
	s := newSale(t, srv)
	s.reset(1500, "none", "async")
	// Paced, so that orders keep arriving while the kill looks for a
	// moment when the child's consumer holds some.
	var outs []outcome
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		outs = s.buyFor(6*time.Second, 8, burstUsers)
	}()

	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	dead, held, err := in.KillHolding(ctx, srv.Orders.Queue().DeliveredTo)
	if err != nil {
		t.Fatal(err)
	}
	orphaned := pendingOrders(t, s.rdb, srv.Orders, dead)
	t.Logf("killed consumer %s holding %d orders (%d read back)", dead, held, len(orphaned))
	if len(orphaned) == 0 {
		t.Fatal("the killed consumer held no order")
	}

	<-sent
	s.waitDrained()
	if n := pendingOrders(t, s.rdb, srv.Orders, dead); len(n) != 0 {
		t.Errorf("the dead consumer still holds %d orders", len(n))
	}
	st := s.checkPromise(outs)
	for _, id := range orphaned {
		if o, ok := st.orders[id]; !ok {
			t.Errorf("order %s, held by the dead consumer, was not written", id)
		} else if len(st.byUser[o.UserID]) != 1 {
			t.Errorf("order %s's buyer has %d orders", id, len(st.byUser[o.UserID]))
		}
	}
	if accepted := accepted202(outs); len(st.orders) != accepted {
		t.Errorf("%d orders for %d purchases answered 202", len(st.orders), accepted)
	}
	s.checkNoDeadLetters()
}

// pendingOrders are the order ids delivered to consumer and not
// acknowledged, over every registered stream.
func pendingOrders(t *testing.T, rdb redis.UniversalClient, svc *order.Service, consumer string) []idgen.ID {
	t.Helper()
	ctx := context.Background()
	streams, err := svc.Queue().Streams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []idgen.ID
	for _, st := range streams {
		pend, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: st, Group: stock.Group, Start: "-", End: "+",
			Count: 100_000, Consumer: consumer}).Result()
		if err != nil && !strings.HasPrefix(err.Error(), "NOGROUP") {
			t.Fatalf("reading what %s holds in %s: %v", consumer, st, err)
		}
		for _, p := range pend {
			msgs, err := rdb.XRangeN(ctx, st, p.ID, p.ID, 1).Result()
			if err != nil || len(msgs) != 1 {
				t.Fatalf("reading message %s of %s: %v", p.ID, st, err)
			}
			id, err := idgen.ParseID(msgs[0].Values["id"].(string))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
	}
	return ids
}

// waitDrained waits until the product's queue is empty.
func (s *sale) waitDrained() api.Audit {
	s.t.Helper()
	var a api.Audit
	waitFor(s.t, "the queue drained", func() bool {
		a = s.audit()
		return a.Queued == 0
	})
	return a
}

// checkNoDeadLetters fails the test if an order went to the dead letters.
func (s *sale) checkNoDeadLetters() {
	s.t.Helper()
	n, err := s.rdb.XLen(context.Background(), stock.DeadLetterKey).Result()
	if err != nil {
		s.t.Fatal(err)
	}
	if n != 0 {
		s.t.Errorf("%d orders in the dead letters", n)
	}
}

// accepted202 is the outcomes' 202s.
func accepted202(outs []outcome) int {
	n := 0
	for _, o := range outs {
		if o.status == http.StatusAccepted {
			n++
		}
	}
	return n
}

// The async mode with its database cut off for 10s (a TCP proxy in front of
// a mariadbd of the test's own, cut: connections reset, new ones closed):
// purchases go on being accepted (202) during the cut, the consumer retries
// its batch with a bounded backoff (a handful of tries, not a spin), and
// once the database is back the backlog drains: every 202 has its row,
// nothing is dead-lettered, and the audit is exact.
func testAsyncDatabaseCut(t *testing.T) {
	t.Parallel()
	db := testkit.OwnMySQL(t, testkit.OwnMySQLOptions{})
	dsn, p := behindProxy(t, db.Database(t, ""))
	r := ownRedis(t)
	srv := start(t, config(t, r.Addr, dsn), app.Extras{})
	s := newSale(t, srv)
	s.reset(3000, "none", "async")
	outs := s.startBurst(200, 20).wait(t)

	const cut = 10 * time.Second
	s.accountsFor(cut, 8, 2*burstUsers)
	before := srv.Consumer.Retries()
	p.Cut()
	during := s.buyFor(cut, 8, 2*burstUsers)
	p.Restore()
	retries := srv.Consumer.Retries() - before
	accepted := accepted202(during)
	t.Logf("during the %s cut: %d purchases answered %v; the consumer retried %d times", cut, len(during), counts(during), retries)
	if accepted == 0 || accepted != len(during) {
		t.Errorf("during the cut %d of %d purchases were accepted (202): acceptance must go on without the database", accepted, len(during))
	}
	// 10s of backoff doubling from 100ms to 5s is about 8 tries; a spin
	// would be thousands.
	if retries == 0 || retries > 30 {
		t.Errorf("the consumer retried %d times during a %s cut: want a few (it met the cut, with a bounded backoff)", retries, cut)
	}
	s.waitDrained()
	s.checkPromise(append(outs, during...))
	s.checkNoDeadLetters()
}

// buyEvery is buyFor's pace: one purchase a tick, across its clients.
const buyEvery = 5 * time.Millisecond

// accountsFor makes the accounts of every buyer buyFor(d, concurrency,
// base) may send: before a fault that holds the database back.
func (s *sale) accountsFor(d time.Duration, concurrency int, base int64) {
	ids := make([]int64, int(d/buyEvery)+concurrency+1)
	for i := range ids {
		ids[i] = base + int64(i) + 1
	}
	s.accounts(ids...)
}

// buyFor sends purchases of fresh buyers from user base up, concurrency at
// a time, for d, at most 200 a second in all, and returns what each
// client was told.
func (s *sale) buyFor(d time.Duration, concurrency int, base int64) []outcome {
	s.accountsFor(d, concurrency, base)
	var mu sync.Mutex
	var outs []outcome
	var next atomic.Int64
	tick := time.NewTicker(buyEvery)
	defer tick.Stop()
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for time.Now().Before(end) {
				<-tick.C
				user := base + next.Add(1)
				o := buy(context.Background(), s.client, s.urls[0], s.product, user, "during-"+strconv.FormatInt(user, 10))
				mu.Lock()
				outs = append(outs, o)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return outs
}

// A poisoned order (the lab's fault: queued with a row the database
// refuses) goes to the dead letters with the database's reason, its unit
// back on its shard and its buyer told why; the orders queued around it
// are written. Nothing is retried for ever: the queue drains. The audit
// counts the dead letter, so that a client's 202s are its orders and its
// dead letters. It needs a database that keeps column sizes: a mariadbd of
// the test's own (SQLite keeps none, and go-mysql-server's rollback of the
// refused batch leaves its other rows half there).
func testAsyncPoison(t *testing.T) {
	t.Parallel()
	r := ownRedis(t)
	cfg := config(t, r.Addr, testkit.OwnMySQL(t, testkit.OwnMySQLOptions{}).Database(t, ""))
	srv := start(t, cfg, app.Extras{})
	s := newSale(t, srv)
	units := 200
	lab := true
	req := api.ProductRequest{ID: &s.product, Stock: &units, Mode: "async", Lab: lab}
	if status, body := s.operator(s.urls[0]+"/api/products", req); status != http.StatusOK {
		t.Fatalf("creating product %d: %d %s", s.product, status, body)
	}
	b := s.startBurst(100, 10)
	poisoner := int64(7)
	status, body := s.post(s.urls[0]+"/api/orders", "poison-1", api.OrderRequest{UserID: &poisoner, ProductID: &s.product, Poison: true})
	if status != http.StatusAccepted {
		t.Fatalf("the poisoned purchase: %d %s, want 202", status, body)
	}
	var poisoned api.Order
	if err := jsonUnmarshal(body, &poisoned); err != nil {
		t.Fatal(err)
	}
	outs := b.wait(t)
	a := s.waitDrained()

	dead, err := s.rdb.XRange(context.Background(), stock.DeadLetterKey, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Values["id"] != poisoned.ID {
		t.Fatalf("dead letters %v: want the poisoned order %s alone", dead, poisoned.ID)
	}
	reason, _ := dead[0].Values["reason"].(string)
	t.Logf("dead letter %s: %s", poisoned.ID, reason)
	if !strings.Contains(reason, "idem_key") {
		t.Errorf("the dead letter's reason %q does not say what the database refused", reason)
	}
	var got api.Order
	s.get("/api/orders/"+poisoned.ID, &got)
	if got.Status != "failed" || got.Reason == "" {
		t.Errorf("the poisoned order reads %+v: want failed, with the reason", got)
	}
	st := s.checkPromise(outs) // every other 202 is an order; the units add up
	if len(st.orders) != accepted202(outs) || a.DeadLettered != 1 {
		t.Errorf("%d orders for %d other purchases answered 202, %d dead letters counted: want all written, 1", len(st.orders), accepted202(outs), a.DeadLettered)
	}
	if st.remaining != units-len(st.orders) {
		t.Errorf("%d units in the store: the poisoned order's unit did not come back", st.remaining)
	}
	// Its buyer may buy again, now without poison.
	again := buy(context.Background(), s.client, s.urls[0], s.product, poisoner, "poison-2")
	if again.status != http.StatusAccepted {
		t.Errorf("the poisoned order's buyer buying again: %v", again)
	}
}

// TestAsyncDurability is what a 202 promises when Redis crashes: the async
// mode's queue is as durable as Redis's persistence. Each subtest starts a
// Redis of its own; those that need redis-server skip without it.
func TestAsyncDurability(t *testing.T) {
	t.Run("IDsPastWrittenAfterRestart", testIDsPastWrittenAfterRestart)
	t.Run("NoIDTwiceAcrossEmptyRestart", testNoIDTwiceAcrossEmptyRestart)
}

// Redis restarted from a snapshot taken before the sale's orders (as a
// Redis whose last writes its AOF or RDB did not keep): it has the stock,
// and its order id counter went back to a block it had issued more of.
// Before any connection to the new server serves, that block is dropped,
// so the next order's id is past every one written (the consumer would
// refuse a repeated one as another's, and its buyer's 202 would come to
// nothing).
func testIDsPastWrittenAfterRestart(t *testing.T) {
	r := ownRedis(t)
	if r.Kind != "redis-server" {
		testkit.Skip(t, testkit.NoRedisServer, "needs redis-server on PATH: the embedded Redis keeps no snapshot across a restart and tells no run id")
	}
	srv := start(t, config(t, r.Addr, ""), app.Extras{})
	s := newSale(t, srv)
	s.reset(300, "none", "async")
	// The snapshot holds a block already: a first order drew it.
	first := s.buy(burstUsers-1, "before-the-snapshot")
	if first.status != http.StatusAccepted {
		t.Fatalf("the first purchase: %v", first)
	}
	if err := s.rdb.Save(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	outs := s.startBurst(100, 10).wait(t)
	s.waitDrained()
	st := s.checkPromise(append(outs, first))
	var last idgen.ID
	for id := range st.orders {
		last = max(last, id)
	}
	if err := r.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	var again outcome
	waitFor(t, "a purchase on the restarted Redis", func() bool {
		again = buy(context.Background(), s.client, s.urls[0], s.product, 2*burstUsers, "after-restart")
		return again.status == http.StatusAccepted
	})
	id, err := idgen.ParseID(again.order)
	if err != nil || id <= last || st.rows[id].ID != 0 {
		t.Errorf("a purchase after the restart: %v; want an id past %s, the largest written (%+v)", again, last, st.rows[id])
	}
	t.Logf("largest order id written %s (seq %d); the first after the restart %s (seq %d)", last, last.Seq(), id, id.Seq())
}

// Redis restarted empty mid-burst (SIGKILL, no persistence): the orders
// queued and not yet written are gone, and so is the order id counter.
// Whatever else was lost, no order id is told to two buyers: the ids drawn
// after the restart, in the very second of the kill too, are past every id
// the lost server drew (it drew none past the block reserved in SQL).
func testNoIDTwiceAcrossEmptyRestart(t *testing.T) {
	r := ownRedis(t)
	srv := start(t, config(t, r.Addr, ""), app.Extras{})
	s := newSale(t, srv)
	const buyers = 4000
	s.reset(buyers, "none", "async")
	b := s.startBurst(buyers, 50)
	b.waitAnswered(t, buyers/4)
	if err := r.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	outs := b.wait(t)
	told := make(map[string]int64)
	twice := 0
	for _, o := range outs {
		if o.status != http.StatusAccepted {
			continue
		}
		if other, ok := told[o.order]; ok && other != o.user {
			twice++
			if twice <= 5 {
				t.Errorf("order id %s told to users %d and %d", o.order, other, o.user)
			}
		}
		told[o.order] = o.user
	}
	t.Logf("Redis (%s) restarted empty after %d answers: clients told %v; %d order ids told to two buyers",
		r.Kind, buyers/4, counts(outs), twice)
	if twice > 0 {
		t.Errorf("%d order ids told to two buyers", twice)
	}
}
