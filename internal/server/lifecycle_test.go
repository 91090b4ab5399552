package server_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"seckill/internal/api"
	"seckill/internal/testkit/testenv"
)

// The order lifecycle over HTTP: each transition raced by many goroutines
// released together, against the real servers when REDIS_ADDR and
// MYSQL_DSN are set; the audit's equation (initial = remaining + unpaid +
// paid + queued) after each.

// buyAll buys one unit for users 1..n and returns their orders.
func (e *env) buyAll(id int64, n int) []api.Order {
	e.t.Helper()
	orders := make([]api.Order, n)
	for i := range orders {
		if st := e.do("POST", "/api/orders", map[string]any{"user_id": i + 1, "product_id": id}, &orders[i]); st != http.StatusCreated {
			e.t.Fatalf("user %d buys product %d: %d", i+1, id, st)
		}
	}
	return orders
}

// change pays or cancels an order for user, and returns the outcome.
func (e *env) change(o api.Order, action string, user int64) outcome {
	var ae api.Error
	st := e.do("POST", "/api/orders/"+o.ID+"/"+action, map[string]any{"user_id": user}, &ae)
	return outcome{st, ae.Code}
}

// fullAudit reads the audit with its lifecycle counts.
func (e *env) fullAudit(id int64) api.Audit {
	e.t.Helper()
	var a api.Audit
	if st := e.do("GET", fmt.Sprintf("/api/products/%d/audit", id), nil, &a); st != http.StatusOK {
		e.t.Fatalf("audit of %d: status %d", id, st)
	}
	return a
}

// settledAudit waits until no take is unsettled (a cancel commits in SQL,
// then returns its unit) and checks the audit's equation.
func (e *env) settledAudit(id int64) api.Audit {
	e.t.Helper()
	var a api.Audit
	e.eventually("every take settled", func() bool { a = e.fullAudit(id); return a.Unsettled == 0 })
	if a.Initial != a.Remaining+a.Unpaid+a.Paid+a.Queued || a.Verdict != api.VerdictOK {
		e.t.Errorf("audit %+v: want initial = remaining + unpaid + paid + queued, OK", a)
	}
	return a
}

// eventually polls ok every 20ms until it holds, for 15s at most.
func (e *env) eventually(what string, ok func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !ok() {
		if time.Now().After(deadline) {
			e.t.Fatalf("waited 15s for %s", what)
		}
		<-tick.C
	}
}

// race runs each of fs once per order (as its buyer, user i+1), all
// released together, and returns the outcomes per order, in fs's order.
func race(orders []api.Order, fs ...func(api.Order, int64) outcome) [][]outcome {
	out := make([][]outcome, len(orders))
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i, o := range orders {
		out[i] = make([]outcome, len(fs))
		for j, f := range fs {
			wg.Go(func() {
				<-gate
				out[i][j] = f(o, int64(i+1))
			})
		}
	}
	close(gate)
	wg.Wait()
	return out
}

func TestLifecycleRaces(t *testing.T) {
	e := startDefault(t)
	pay := func(o api.Order, u int64) outcome { return e.change(o, "pay", u) }
	cancel := func(o api.Order, u int64) outcome { return e.change(o, "cancel", u) }

	for _, mode := range []string{"lua", "db"} {
		t.Run("pay-twice/"+mode, func(t *testing.T) {
			id := e.reset(product{"stock": 10, "shards": 2, "mode": mode})
			orders := e.buyAll(id, 10)
			for i, outs := range race(orders, pay, pay, pay, pay) {
				if n := count(outs, http.StatusOK, ""); n != 1 || count(outs, http.StatusConflict, api.CodeAlreadyPaid) != 3 {
					t.Errorf("order %d paid four times at once: %v, want one 200 and three 409 already_paid", i, outs)
				}
			}
			if a := e.settledAudit(id); a.Paid != 10 || a.Remaining != 0 {
				t.Errorf("audit %+v: want 10 paid", a)
			}
		})
		t.Run("cancel-twice/"+mode, func(t *testing.T) {
			id := e.reset(product{"stock": 10, "shards": 2, "mode": mode})
			orders := e.buyAll(id, 10)
			for i, outs := range race(orders, cancel, cancel, cancel, cancel) {
				if n := count(outs, http.StatusOK, ""); n != 1 || count(outs, http.StatusConflict, api.CodeOrderCancelled) != 3 {
					t.Errorf("order %d cancelled four times at once: %v, want one 200 and three 409 order_cancelled", i, outs)
				}
			}
			// Each unit back once: ten, not forty.
			if a := e.settledAudit(id); a.Cancelled != 10 || a.Remaining != 10 || a.Unpaid+a.Paid != 0 {
				t.Errorf("audit %+v: want 10 cancelled and 10 units back", a)
			}
		})
		t.Run("pay-vs-cancel/"+mode, func(t *testing.T) {
			id := e.reset(product{"stock": 20, "shards": 2, "mode": mode})
			orders := e.buyAll(id, 20)
			paid := 0
			for i, outs := range race(orders, pay, cancel) {
				won := count(outs, http.StatusOK, "")
				lost := count(outs, http.StatusConflict, api.CodeAlreadyPaid) + count(outs, http.StatusConflict, api.CodeOrderCancelled)
				if won != 1 || lost != 1 {
					t.Errorf("order %d paid and cancelled at once: %v, want one winner and one 409", i, outs)
				}
				if outs[0].status == http.StatusOK {
					paid++
				}
			}
			a := e.settledAudit(id)
			if a.Paid != paid || a.Paid+a.Cancelled != 20 || a.Remaining != a.Cancelled {
				t.Errorf("audit %+v: want %d paid (as answered), the rest cancelled with their units back", a, paid)
			}
		})
	}

	// The payment window's end against payments and cancellations sent
	// around it: each order paid, or cancelled (by its buyer or the
	// timeout), never both, and each cancel's unit back once.
	for _, action := range []string{"pay", "cancel"} {
		t.Run(action+"-vs-timeout", func(t *testing.T) {
			id := e.reset(product{"stock": 30, "shards": 3, "mode": "lua", "pay_timeout_ms": 1000})
			orders := e.buyAll(id, 30)
			at := func(o api.Order, u int64) outcome {
				// Spread over the window's end, a millisecond apart.
				time.Sleep(time.Until(o.DueAt.Add(time.Duration(u-15) * time.Millisecond)))
				return e.change(o, action, u)
			}
			ok := 0
			for i, outs := range race(orders, at) {
				switch o := outs[0]; {
				case o.status == http.StatusOK:
					ok++
				case o.status == http.StatusConflict && o.code == api.CodeOrderCancelled:
				default:
					t.Errorf("order %d: %s at its window's end answered %v, want 200 or 409 order_cancelled", i, action, o)
				}
			}
			e.eventually("every order paid or cancelled", func() bool { return e.fullAudit(id).Unpaid == 0 })
			a := e.settledAudit(id)
			want := api.Audit{Paid: ok, Cancelled: 30 - ok}
			if action == "cancel" {
				want = api.Audit{Cancelled: 30}
			}
			if a.Paid != want.Paid || a.Cancelled != want.Cancelled || a.Unpaid != 0 || a.Remaining != a.Cancelled {
				t.Errorf("audit %+v after %d %ss answered 200: want %d paid, %d cancelled, their units back", a, ok, action, want.Paid, want.Cancelled)
			}
		})
	}
}

// Paying or cancelling what cannot be: 404 or 409 with a message, and
// nothing changes.
func TestLifecycleBadInput(t *testing.T) {
	e := startDefault(t)
	id := e.reset(product{"stock": 5, "shards": 1, "mode": "lua"})
	orders := e.buyAll(id, 3)
	if out := e.change(orders[1], "cancel", 2); out.status != http.StatusOK {
		t.Fatalf("cancel: %v", out)
	}
	if out := e.change(orders[2], "pay", 3); out.status != http.StatusOK {
		t.Fatalf("pay: %v", out)
	}
	before := e.fullAudit(id)
	unknown := api.Order{ID: "123456789012345678"}
	for _, tc := range []struct {
		name   string
		order  api.Order
		action string
		user   int64
		status int
		code   string
	}{
		// A user_id in the body reaches lab orders only; an unknown order
		// may be another product's, and the answer does not say whether
		// it exists (TestStrangerCannotActAsAnotherBuyer).
		{"pay an unknown order", unknown, "pay", 1, http.StatusBadRequest, api.CodeBadRequest},
		{"cancel an unknown order", unknown, "cancel", 1, http.StatusBadRequest, api.CodeBadRequest},
		{"pay someone else's order", orders[0], "pay", 2, http.StatusNotFound, api.CodeNotFound},
		{"cancel someone else's order", orders[0], "cancel", 3, http.StatusNotFound, api.CodeNotFound},
		{"pay a cancelled order", orders[1], "pay", 2, http.StatusConflict, api.CodeOrderCancelled},
		{"cancel a cancelled order", orders[1], "cancel", 2, http.StatusConflict, api.CodeOrderCancelled},
		{"pay twice", orders[2], "pay", 3, http.StatusConflict, api.CodeAlreadyPaid},
		{"cancel a paid order", orders[2], "cancel", 3, http.StatusConflict, api.CodeAlreadyPaid},
	} {
		var ae api.Error
		st := e.do("POST", "/api/orders/"+tc.order.ID+"/"+tc.action, map[string]any{"user_id": tc.user}, &ae)
		if st != tc.status || ae.Code != tc.code || ae.Error == "" {
			t.Errorf("%s: %d %+v, want %d %s with a message", tc.name, st, ae, tc.status, tc.code)
		}
	}
	for _, body := range []any{map[string]any{}, map[string]any{"user_id": 0}, map[string]any{"user_id": -1}, `{"user_id":"1"}`} {
		if st := e.do("POST", "/api/orders/"+orders[0].ID+"/pay", body, nil); st != http.StatusBadRequest {
			t.Errorf("pay with %v: %d, want 400", body, st)
		}
	}
	if after := e.fullAudit(id); after.Paid != before.Paid || after.Cancelled != before.Cancelled || after.Unpaid != before.Unpaid ||
		after.Remaining != before.Remaining {
		t.Errorf("audit after the refusals %+v, before %+v: want nothing changed", after, before)
	}
	var o api.Order
	if e.do("GET", "/api/orders/"+orders[0].ID, nil, &o); o.Status != "unpaid" {
		t.Errorf("order 0 after the refusals: %+v, want unpaid", o)
	}

	// Payment windows outside 1s–24h are refused.
	for _, ms := range []int64{-1, 1, 999, 86_400_001, 1 << 62} {
		var ae api.Error
		p := map[string]any{"id": testenv.ProductID(t), "stock": 1, "pay_timeout_ms": ms}
		if st := e.do("POST", "/api/products", p, &ae); st != http.StatusBadRequest || ae.Code != api.CodeBadRequest {
			t.Errorf("pay_timeout_ms %d: %d %+v, want 400 bad_request", ms, st, ae)
		}
	}
}

// A cancel commits in SQL first, then returns the unit. With the database
// refusing, nothing changes and no unit goes back; with Redis failing after
// the commit, the order is cancelled and its unit is still out, until the
// reconciler returns it, once.
func TestCancelWhenABackendFails(t *testing.T) {
	mr := miniredis.RunT(t) // a Redis of the test's own: it fails on purpose
	cfg := testenv.Config(t)
	cfg.RedisAddr = mr.Addr()
	cfg.ReconcileGrace = 50 * time.Millisecond
	e := start(t, cfg)
	id := e.reset(product{"stock": 3, "shards": 1, "mode": "lua"})
	orders := e.buyAll(id, 2)

	db := e.srv.DB()
	trigger := "CREATE TRIGGER refuse_cancel BEFORE UPDATE ON orders BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
	if db.Dialector.Name() == "mysql" {
		trigger = "CREATE TRIGGER refuse_cancel BEFORE UPDATE ON orders FOR EACH ROW SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the test'"
	}
	if err := db.Exec(trigger).Error; err != nil {
		t.Fatalf("installing the trigger: %v", err)
	}
	if out := e.change(orders[0], "cancel", 1); out.status != http.StatusServiceUnavailable {
		t.Errorf("cancel while the database refuses: %v, want 503", out)
	}
	if a := e.fullAudit(id); a.Remaining != 1 || a.Unpaid != 2 || a.Cancelled != 0 || a.Verdict != api.VerdictOK {
		t.Errorf("audit %+v: want the order unpaid and its unit not back", a)
	}
	if err := db.Exec("DROP TRIGGER refuse_cancel").Error; err != nil {
		t.Fatal(err)
	}

	// Redis fails after the SQL commit: the cancel stands, the give-back waits.
	mr.SetError("LOADING the test says Redis is down")
	out := e.change(orders[0], "cancel", 1)
	mr.SetError("")
	if out.status != http.StatusOK {
		t.Fatalf("cancel while Redis fails: %v, want 200 (the order is cancelled in SQL)", out)
	}
	if a := e.fullAudit(id); a.Remaining != 1 || a.Cancelled != 1 || a.Unsettled != 1 {
		t.Errorf("audit %+v: want the order cancelled and its unit still out (unsettled)", a)
	}
	returned := 0
	e.eventually("the reconciler returning the unit", func() bool {
		var r api.Reconciliation
		if st := e.do("POST", fmt.Sprintf("/api/products/%d/reconcile", id), nil, &r); st != http.StatusOK {
			t.Fatalf("reconcile: %d", st)
		}
		returned += r.Returned
		return returned > 0
	})
	var r api.Reconciliation
	e.do("POST", fmt.Sprintf("/api/products/%d/reconcile", id), nil, &r)
	if returned != 1 || r.Returned != 0 {
		t.Errorf("the reconciler returned %d, then %d: want the cancelled order's unit once", returned, r.Returned)
	}
	if a := e.settledAudit(id); a.Remaining != 2 || a.Cancelled != 1 || a.Unpaid != 1 {
		t.Errorf("audit %+v: want 2 left, 1 cancelled, 1 unpaid", a)
	}
}
