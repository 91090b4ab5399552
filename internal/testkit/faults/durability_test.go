package faults_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/order"
	"seckill/internal/testkit/child"
	"seckill/internal/testkit/testenv"
)

// TestDurabilityDecides: what a 202 survives is read from the Redis of a
// test's own, and decides. Without persistence a product that is not a lab
// product cannot be async or mq (409 not_durable, naming appendonly), a lab
// product can, and the view says none; with appendonly yes and everysec
// the same product is created and its view says everysec; when the Redis
// then loses its append-only file, the product stays and its view says
// none.
func TestDurabilityDecides(t *testing.T) {
	r, err := child.StartRedisWith(t.Context(), exe(t), t.TempDir(), os.Stderr, child.NoPersistence)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Kill() })
	srv := testenv.Start(t, config(t, r.Addr, ""), app.Extras{})
	s := newSale(t, srv)
	create := func(mode string, lab bool) (int, api.Error) {
		t.Helper()
		units := 10
		status, body := s.operator(s.urls[0]+"/api/products", api.ProductRequest{ID: &s.product, Stock: &units, Mode: mode, Lab: lab, Reset: true})
		var e api.Error
		if status != http.StatusOK {
			_ = json.Unmarshal(body, &e)
		}
		return status, e
	}
	// redis-server says appendonly is no; the embedded Redis answers no
	// CONFIG at all, and unreadable settings are taken as none.
	reason := "appendonly is no"
	if r.Kind != "redis-server" {
		reason = "could not be read"
	}
	for _, mode := range []string{api.ModeAsync, api.ModeMQ} {
		if status, e := create(mode, false); status != http.StatusConflict || e.Code != api.CodeNotDurable || !strings.Contains(e.Error, reason) {
			t.Errorf("a %s product on a %s without persistence: %d %+v; want 409 %s naming %q", mode, r.Kind, status, e, api.CodeNotDurable, reason)
		}
	}
	if status, e := create(api.ModeRMW, false); status != http.StatusOK {
		t.Fatalf("an rmw product there: %d %+v; want 200 (its answers wait for the order's row)", status, e)
	}
	if v := s.view(); v.Durability != api.DurabilityNone || !strings.Contains(v.DurabilityReason, reason) {
		t.Errorf("the view on a Redis without persistence: durability %q (%s); want none naming %q", v.Durability, v.DurabilityReason, reason)
	}
	lab := s.product + 1 // a product of its own: lab is fixed at creation
	units := 10
	if status, body := s.operator(s.urls[0]+"/api/products", api.ProductRequest{ID: &lab, Stock: &units, Mode: api.ModeAsync, Lab: true}); status != http.StatusOK {
		t.Errorf("a lab async product on a Redis without persistence: %d %s; want 200 (the lab shows what is lost)", status, body)
	}

	if r.Kind != "redis-server" {
		t.Skip("the rest needs redis-server on PATH: the embedded Redis has no append-only file to turn on")
	}
	if err := r.SetPersistence(t.Context(), child.AOFEverysec); err != nil {
		t.Fatal(err)
	}
	if status, e := create(api.ModeAsync, false); status != http.StatusOK {
		t.Fatalf("an async product with appendonly yes: %d %+v; want 200", status, e)
	}
	if v := s.view(); v.Durability != api.DurabilityEverysec || v.Mode != api.ModeAsync {
		t.Errorf("the view with appendfsync everysec: durability %q (%s), mode %s; want everysec, async", v.Durability, v.DurabilityReason, v.Mode)
	}
	// The setting changes under a product that exists: it stays on sale,
	// and its view says so within the service's reading's age.
	if err := r.SetPersistence(t.Context(), child.NoPersistence); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the view saying none", func() bool { return s.view().Durability == api.DurabilityNone })
}

// view reads the product's view.
func (s *sale) view() api.ProductView {
	s.t.Helper()
	var v api.ProductView
	s.get("/api/products/"+strconv.FormatInt(s.product, 10), &v)
	return v
}

// A Redis with an append-only file (everysec) SIGKILLed while the consumer
// had written a batch it could not acknowledge, then restarted from its
// file: the batch's entries are queued again, and their orders are rows.
// Until the consumer meets them again (its claim idle) and acknowledges
// them, the audit says SETTLING, counting each unit once, never
// INCONSISTENT; then OK, with every 202 an order.
func TestAsyncReplayAfterRestartFromAOF(t *testing.T) {
	r, err := child.StartRedisWith(t.Context(), exe(t), t.TempDir(), os.Stderr, child.AOFEverysec)
	if err != nil {
		t.Skipf("needs redis-server on PATH, for its append-only file: %v", err)
	}
	t.Cleanup(func() { r.Kill() })
	cfg := config(t, r.Addr, "")
	if cfg.MySQLDSN == "" {
		t.Skip("needs MYSQL_DSN: a row lock holds the consumer between its read of a batch and its write, which SQLite cannot")
	}
	// Long enough that the batch is still unacknowledged when the audit
	// first looks after the restart.
	cfg.ClaimIdle = 10 * time.Second
	srv := testenv.Start(t, cfg, app.Extras{})
	s := newSale(t, srv)
	units, shards := 400, 2
	if status, body := s.operator(s.urls[0]+"/api/products", api.ProductRequest{ID: &s.product, Stock: &units, Shards: &shards, Lock: "none", Mode: api.ModeAsync}); status != http.StatusOK {
		t.Fatalf("creating a non-lab async product on a Redis with appendonly yes: %d %s", status, body)
	}

	// The consumer writes a batch under a shared lock on the product's
	// row: held here, it waits with the batch delivered to it.
	tx := s.db.Begin()
	t.Cleanup(func() { tx.Rollback() })
	if err := tx.Exec("SELECT id FROM products WHERE id = ? FOR UPDATE", s.product).Error; err != nil {
		t.Fatal(err)
	}
	outs := s.startBurst(300, 20).wait(t)
	if n := accepted202(outs); n != len(outs) {
		t.Fatalf("%d of %d purchases answered 202: %v", n, len(outs), counts(outs))
	}
	ctx := t.Context()
	var held int64
	waitFor(t, "a batch delivered to the consumer", func() bool {
		d, err := srv.Orders.Queue().DeliveredTo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = 0
		for _, n := range d {
			held += n
		}
		return held > 0
	})
	aofWritten(t, r.Addr)
	r.Kill()
	tx.Rollback() // the consumer writes its batch; its acknowledgement finds no Redis
	waitFor(t, "the batch written and its acknowledgement failed", func() bool { return srv.Consumer.Unacknowledged() > 0 })
	var written int64
	if err := s.db.Model(&order.Order{}).Where("product_id = ?", s.product).Count(&written).Error; err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("the consumer held %d orders; %d written while Redis was down", held, written)

	settling := 0
	deadline := time.Now().Add(patience)
	var last string
	for {
		a := s.audit()
		if now := fmt.Sprintf("%s queued %d replaying %d orders %d remaining %d", a.Verdict, a.Queued, a.Replaying, a.Orders, a.Remaining); now != last {
			t.Logf("audit: %s", now)
			last = now
		}
		switch a.Verdict {
		case api.VerdictSettling:
			settling++
			if a.LostUpdates != 0 || a.Replaying == 0 {
				t.Errorf("a settling audit %+v: want every unit counted once, with the entries written already", a)
			}
		case api.VerdictInconsistent:
			t.Fatalf("the audit while written entries replay: %+v; want SETTLING, not INCONSISTENT", a)
		}
		if a.Queued == 0 && a.Verdict == api.VerdictOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the audit did not settle within %s: %+v", patience, a)
		}
		time.Sleep(20 * time.Millisecond) // the poll interval
	}
	if settling == 0 {
		t.Error("no audit said SETTLING: the restart replayed no written entry, and the test showed nothing")
	}
	t.Logf("%d audits said SETTLING before OK", settling)
	s.checkPromise(outs)
	s.checkNoDeadLetters()
}

// A Redis without persistence restarted empty with a backlog of 202s (no
// consumer runs): the product is laid out anew from the orders, which hold
// none of them. The audit after the rebuild does not say OK: it says
// REBUILT, when, and what it cannot count.
func TestAuditAfterRebuildSaysWhatItCannotCount(t *testing.T) {
	r := ownRedis(t)
	cfg := config(t, r.Addr, "")
	cfg.Consume = false // every 202's order stays queued in Redis
	srv := testenv.Start(t, cfg, app.Extras{})
	s := newSale(t, srv)
	s.reset(200, "none", api.ModeAsync) // a lab product: the Redis keeps nothing
	outs := s.startBurst(100, 10).wait(t)
	accepted := accepted202(outs)
	if a := s.audit(); accepted == 0 || a.Queued != accepted {
		t.Fatalf("before the restart: %d 202s, audit %+v; want them all queued", accepted, a)
	}
	before := time.Now()
	if err := r.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	a := s.audit() // 503 rebuilding until the rebuild is done
	t.Logf("%d buyers told 202 before Redis (%s) restarted empty; the audit after: %+v", accepted, r.Kind, a)
	if a.Verdict != api.VerdictRebuilt || a.Rebuilt == nil || a.Rebuilt.At.Before(before) || !strings.Contains(a.Rebuilt.Uncounted, "202") {
		t.Errorf("the audit after the rebuild: verdict %s, rebuilt %+v; want REBUILT, since the restart, saying the queued 202s are not counted", a.Verdict, a.Rebuilt)
	}
	if a.Orders != 0 || a.Remaining != 200 {
		t.Errorf("the audit after the rebuild: %d orders, %d left; want 0 and 200 (the queue was lost)", a.Orders, a.Remaining)
	}
}

// aofWritten waits until the redis-server at addr has written its
// append-only file's buffer to the kernel. With appendfsync everysec a
// write(2) is postponed, up to 2 s, while the last second's fsync is still
// running (a slow or busy disk), and the writes answered meanwhile are in
// no file: a SIGKILL then loses them. This test is about what the file
// kept; that loss is another (docs/INVARIANT.md).
func aofWritten(t *testing.T, addr string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	waitFor(t, "the append-only file written", func() bool {
		info, err := rdb.Info(t.Context(), "persistence").Result()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(info, "aof_buffer_length:0\r\n") && strings.Contains(info, "aof_pending_bio_fsync:0\r\n")
	})
}
