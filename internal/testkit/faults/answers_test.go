package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
	"seckill/internal/outbox"
	"seckill/internal/stock"
	"seckill/internal/testkit"
)

// lostReplies is a client hook that lets the async take's script run and
// then loses its reply, as a connection cut after the command was sent
// would.
type lostReplies struct {
	armed atomic.Bool
	lost  atomic.Int32
}

func (h *lostReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lostReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *lostReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil || !h.armed.Load() || !asyncTake(cmd) {
			return err
		}
		h.lost.Add(1)
		cmd.SetErr(io.ErrUnexpectedEOF)
		return io.ErrUnexpectedEOF
	}
}

// asyncTake tells async.lua's run by its argument the consumers' group,
// which no other script is given.
func asyncTake(cmd redis.Cmder) bool {
	if n := cmd.Name(); n != "evalsha" && n != "eval" {
		return false
	}
	for _, a := range cmd.Args() {
		if a == stock.Group {
			return true
		}
	}
	return false
}

// An async take whose reply is lost, and its retry's too, answers 503
// outcome_unknown naming the order that will settle: the id is drawn
// before the take, and it is the row the consumer writes.
func TestAsyncUnknownOutcomeNamesTheOrder(t *testing.T) {
	srv := start(t, config(t, "", ""), app.Extras{})
	s := newSale(t, srv)
	s.reset(3, "token", "async")
	lose := new(lostReplies)
	srv.Redis().AddHook(lose)
	lose.armed.Store(true)
	o := s.buy(7, "lost-7")
	lose.armed.Store(false)
	if o.status != http.StatusServiceUnavailable || o.code != api.CodeOutcomeUnknown {
		t.Fatalf("a take whose replies were lost (%d of them): %v; want 503 %s", lose.lost.Load(), o, api.CodeOutcomeUnknown)
	}
	if o.order == "" || o.order == "0" {
		t.Fatalf("%v: want the id of the order that will settle", o)
	}
	var ord api.Order
	waitFor(t, "order "+o.order+" written", func() bool {
		resp, err := s.client.Get(s.urls[0] + "/api/orders/" + o.order)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&ord) != nil {
			return false
		}
		return ord.Status != "pending"
	})
	if ord.ID != o.order || ord.UserID != 7 || ord.Status != "unpaid" {
		t.Errorf("the row: %+v; want order %s of buyer 7, unpaid", ord, o.order)
	}
	s.waitDrained()
	s.checkPromise(nil)
}

// An async order is payable within a 1 s payment window however long it
// waited in the queue: the window starts when its row is written. The
// consumer starts only after the window has passed for every 202 (a
// backlog), and each buyer pays from its 202 on, again while the order is
// queued: every one is paid, none cancelled.
func TestAsyncOrdersPayableInAOneSecondWindow(t *testing.T) {
	cfg := config(t, "", "")
	cfg.Consume = false // started below, late
	srv := start(t, cfg, app.Extras{})
	s := newSale(t, srv)
	const buyers = 30
	units, shards, window := buyers, 3, time.Second
	req := api.ProductRequest{ID: &s.product, Stock: &units, Shards: &shards, Lock: "token", Mode: "async",
		PayTimeoutMS: window.Milliseconds(), Lab: true} // async on a Redis that keeps nothing: a lab product
	if status, body := s.operator(s.urls[0]+"/api/products", req); status != http.StatusOK {
		t.Fatalf("creating product %d: %d %s", s.product, status, body)
	}
	var accepted sync.WaitGroup
	accepted.Add(buyers)
	start := make(chan struct{})
	paid := make([]string, buyers) // what each buyer's last pay was told
	var wg sync.WaitGroup
	for i := range buyers {
		wg.Go(func() {
			<-start
			user := int64(burstUsers + i)
			o := s.buy(user, "pay-"+strconv.FormatInt(user, 10))
			accepted.Done()
			if o.status != http.StatusAccepted {
				paid[i] = o.String()
				return
			}
			deadline := time.Now().Add(patience)
			for time.Now().Before(deadline) {
				status, body := s.post(s.urls[0]+"/api/orders/"+o.order+"/pay", "", api.BuyerRequest{UserID: &user})
				var e api.Error
				if status == http.StatusConflict && json.Unmarshal(body, &e) == nil && e.Code == api.CodeOrderQueued {
					time.Sleep(5 * time.Millisecond) // the poll interval
					continue
				}
				paid[i] = fmt.Sprintf("%d %s", status, body)
				return
			}
			paid[i] = "still queued"
		})
	}
	close(start)
	accepted.Wait()
	// The backlog: every 202's window, counted from the take, is over.
	time.Sleep(window + 200*time.Millisecond)
	c := order.NewConsumer(srv.DB(), srv.Orders, outbox.Options{Block: 20 * time.Millisecond})
	c.Start()
	t.Cleanup(func() { c.Close() })
	wg.Wait()
	for i, p := range paid {
		if !strings.HasPrefix(p, "200 ") || !strings.Contains(p, `"status":"paid"`) {
			t.Errorf("buyer %d: %s; want paid", burstUsers+i, p)
		}
	}
	if a := s.audit(); a.Paid != buyers || a.Cancelled != 0 || a.Verdict != api.VerdictOK {
		t.Errorf("audit %+v: want %d paid, none cancelled, OK", a, buyers)
	}
}

// A reset in the middle of an async burst keeps what the buyers were told:
// every 202 becomes its buyer's row, in the sale it was taken from, none
// dead-lettered; the first sale holds exactly the orders told in it, and
// the new sale's audit is exact.
func TestResetMidAsyncBurst(t *testing.T) {
	srv := start(t, config(t, "", ""), app.Extras{})
	s := newSale(t, srv)
	s.reset(100, "token", "async")
	b := s.startBurst(300, 30)
	b.waitAnswered(t, 40)
	s.reset(100, "token", "async")
	outs := b.wait(t)
	var told []idgen.ID
	for _, o := range outs {
		if o.status == http.StatusAccepted {
			id, err := idgen.ParseID(o.order)
			if err != nil {
				t.Fatalf("%v: %v", o, err)
			}
			told = append(told, id)
		}
	}
	var st state
	waitFor(t, "every 202 written or refused", func() bool {
		st = s.read()
		for _, id := range told {
			if _, ok := st.rows[id]; !ok && !s.deadLettered(id) {
				return false
			}
		}
		return true
	})
	s.waitDrained()
	st = s.read()
	perSale := map[int64]int{}
	for _, id := range told {
		if row, ok := st.rows[id]; ok {
			perSale[row.Sale]++
		} else {
			t.Errorf("order %s was told 202 and went to the dead letters", id)
		}
	}
	t.Logf("202s by sale: %v", perSale)
	if perSale[1] == 0 || perSale[1] > 100 || perSale[2] > 100 {
		t.Errorf("202s by sale %v: want some in sale 1, at most 100 in each", perSale)
	}
	var first int64
	if err := s.db.Model(&order.Order{}).Where("product_id = ? AND sale = 1 AND status IN ?", s.product,
		[]string{order.Unpaid, order.Paid}).Count(&first).Error; err != nil {
		t.Fatal(err)
	}
	if int(first) != perSale[1] {
		t.Errorf("sale 1 holds %d orders, and %d were told 202 in it", first, perSale[1])
	}
	for sale := range int64(2) {
		key := fmt.Sprintf("%d:%d", s.product, sale+1)
		if n, _ := s.rdb.HGet(context.Background(), stock.DeadCountKey, key).Int(); n != 0 {
			t.Errorf("sale %d: %d dead letters", sale+1, n)
		}
	}
	s.checkPromise(outs)
}

// deadLettered reports whether the pending index marks the order refused.
func (s *sale) deadLettered(id idgen.ID) bool {
	v, _ := s.rdb.HGet(context.Background(), stock.PendingKey(id.Time()), id.String()).Result()
	return strings.HasPrefix(v, "failed ")
}

// While units taken by purchases whose outcome is unknown may come back, a
// buyer who finds the store empty is told 409 sold_out with "final": false
// and Retry-After, and the gate is not told the product sold out; once the
// reconciler settled them (no grace to wait: those purchases are over), a
// sold out is final again. The database (a mariadbd of the test's own) is
// paused so that the INSERTs' outcome is unknown.
func TestSoldOutNotFinalWhileUnitsUnsettled(t *testing.T) {
	if !testkit.HaveMariaDB() {
		testkit.Skip(t, testkit.NoMariaDB, "mariadbd and mariadb-install-db are not on PATH: the test pauses a database of its own")
	}
	db := testkit.OwnMySQL(t, testkit.OwnMySQLOptions{})
	cfg := config(t, "", db.Database(t, ""))
	cfg.ReconcileGrace = time.Hour // only the unsettled purchases' takes may skip it
	s := newSale(t, start(t, cfg, app.Extras{}))
	s.reset(4, "none", "lua")
	if o := s.buy(1, "warm"); o.status != http.StatusCreated { // the order ids' block is reserved
		t.Fatalf("before the pause: %v", o)
	}
	s.accounts(10, 11, 12, 100, 300) // the buyers while the database is paused
	db.Pause(t)
	var wg sync.WaitGroup
	outs := make([]outcome, 3)
	for i := range outs {
		wg.Go(func() { outs[i] = s.buy(int64(10+i), "stalled-"+strconv.Itoa(i)) })
	}
	wg.Wait()
	for _, o := range outs {
		if o.code != api.CodeOutcomeUnknown {
			t.Fatalf("a purchase while the database is paused: %v; want outcome_unknown", o)
		}
	}
	soldOut := func(user int64) (http.Header, api.Error) {
		t.Helper()
		h := http.Header{}
		h.Set(api.HeaderIdempotencyKey, "late-"+strconv.FormatInt(user, 10))
		req := api.OrderRequest{ProductID: &s.product}
		b, _ := json.Marshal(req)
		hr, _ := http.NewRequest(http.MethodPost, s.urls[0]+"/api/orders", strings.NewReader(string(b)))
		hr.Header = h
		hr.Header.Set("Content-Type", api.MediaType)
		hr.Header.Set("Authorization", "Bearer "+mustToken(t, s.urls[0], user))
		resp, err := s.client.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e api.Error
		if resp.StatusCode != http.StatusConflict || json.NewDecoder(resp.Body).Decode(&e) != nil || e.Code != api.CodeSoldOut {
			t.Fatalf("buyer %d with the store empty: %d %+v; want 409 sold_out", user, resp.StatusCode, e)
		}
		return resp.Header, e
	}
	h, e := soldOut(100)
	if e.Final == nil || *e.Final || h.Get("Retry-After") == "" || h.Get(api.HeaderSoldOut) != "" {
		t.Errorf("sold out while 3 units are unsettled: final %v, Retry-After %q, %s %q; want final false, a Retry-After, no sold-out header for the gate",
			e.Final, h.Get("Retry-After"), api.HeaderSoldOut, h.Get(api.HeaderSoldOut))
	}
	db.Resume(t)
	s.reconcile()
	// The units that came back (void rows won) are sold again, then the
	// store is empty with nothing unsettled: final.
	for user := int64(200); ; user++ {
		o := s.buy(user, "after-"+strconv.FormatInt(user, 10))
		if o.status == http.StatusCreated {
			continue
		}
		if o.code != api.CodeSoldOut {
			t.Fatalf("after the reconciler: %v", o)
		}
		break
	}
	h, e = soldOut(300)
	if e.Final != nil && !*e.Final || h.Get(api.HeaderSoldOut) == "" {
		t.Errorf("sold out with everything settled: final %v, %s %q; want final, and the gate told", e.Final, api.HeaderSoldOut, h.Get(api.HeaderSoldOut))
	}
	s.checkPromise(nil)
}
