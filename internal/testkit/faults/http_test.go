package faults_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/lab"
	"seckill/internal/lab/harness"
	"seckill/internal/stock"
	"seckill/internal/testkit/testenv"
)

// An anonymous client cannot change how a product is sold — its lock, its
// mode, a hold inside the critical section, a fault — unless the product
// was created as a lab product: 403 lab_only, whether the operator token was
// configured or made by the service. The lab and the harness create lab
// products, and their runs still take every option.
func TestLabOptionsOnlyOnLabProducts(t *testing.T) {
	for _, configured := range []string{"", "admin-secret"} {
		t.Run("token="+strconv.FormatBool(configured != ""), func(t *testing.T) {
			cfg := config(t, "", "")
			cfg.AdminToken = configured
			srv := start(t, cfg, app.Extras{Runs: lab.New(lab.Options{})})
			token := srv.Config.AdminToken // the service's own when none was configured
			s := newSale(t, srv)
			units, one := 10, 1
			ctx := context.Background()
			product := func(lab bool) int64 {
				id := testenv.ProductID(t)
				req := api.ProductRequest{ID: &id, Stock: &units, Shards: &one, Lock: "token", Mode: "rmw", Lab: lab}
				status, body, err := postAs(ctx, s.client, srv.URL+"/api/products", token, req)
				if err != nil || status != http.StatusOK {
					t.Fatalf("the operator creating product %d: %d %s %v", id, status, body, err)
				}
				return id
			}
			sold, labProduct := product(false), product(true)
			for i, tc := range []struct {
				name string
				req  api.OrderRequest
			}{
				{"lock", api.OrderRequest{Lock: "none"}}, {"mode", api.OrderRequest{Mode: "lua"}}, {"hold", api.OrderRequest{HoldMS: 1}},
				{"crash before expire", api.OrderRequest{CrashBeforeExpire: true}}, {"clock skew", api.OrderRequest{ClockSkewMS: 1000}},
				{"abandon", api.OrderRequest{Abandon: true}}, // last: the lab product's lock stays held
			} {
				name, req := tc.name, tc.req
				user := int64(i + 1)
				for _, p := range []int64{sold, labProduct} {
					req.ProductID = &p
					status, body, err := postAs(ctx, s.client, srv.URL+"/api/orders", mustToken(t, srv.URL, user), req)
					switch {
					case err != nil:
						t.Fatal(err)
					case p == sold && (status != http.StatusForbidden || !contains(body, api.CodeLabOnly)):
						t.Errorf("a buyer's %s on a product that is not a lab product: %d %s, want 403 %s", name, status, body, api.CodeLabOnly)
					case p == labProduct && status != http.StatusCreated && !contains(body, api.CodeSoldOut) && !contains(body, api.CodeLockTimeout):
						t.Errorf("%s on a lab product: %d %s, want it taken", name, status, body)
					}
				}
			}
			s.product = sold
			if a := s.audit(); a.Orders != 0 || a.Remaining != units {
				t.Errorf("the product that is not a lab product after the refusals: %+v", a)
			}
			// Nor can anyone make it a lab product: the flag is fixed when it
			// is created, and only the operator resets at all.
			req := api.ProductRequest{ID: &sold, Stock: &units, Lab: true}
			if status, body, _ := post(ctx, s.client, srv.URL+"/api/products", "", req); status == http.StatusOK {
				t.Errorf("an anonymous client turned product %d into a lab product: %s", sold, body)
			}

			// The harness (which the lab runs) creates its products as lab
			// products, and its options are taken.
			row, err := harness.Run(ctx, harness.Spec{Targets: []string{srv.URL}, ProductID: testenv.ProductID(t), AdminToken: token,
				Lock: "token", Mode: "rmw", Hold: harness.Duration(time.Millisecond), Stock: 5, Buyers: 10, Concurrency: 5}, nil)
			if err != nil || row.Verdict != harness.Safe {
				t.Errorf("a harness run with a hold: %s (%s) %v, want SAFE", row.Verdict, row.Note, err)
			}
			run := api.RunSpec{Lock: "none", Mode: "rmw", Stock: 5, Buyers: 20, Concurrency: 10, HoldMS: 2, Fault: api.FaultNone}
			var started api.Run
			if status, body, err := postAs(ctx, s.client, srv.URL+"/api/runs", token, run); err != nil || status != http.StatusAccepted {
				t.Fatalf("starting a lab run: %d %s %v", status, body, err)
			} else if err := jsonUnmarshal(body, &started); err != nil {
				t.Fatal(err)
			}
			var done api.Run
			waitFor(t, "the lab run", func() bool {
				s.get("/api/runs/"+started.ID, &done)
				return done.Status != api.RunRunning && done.Status != api.RunQueued
			})
			if done.Status != api.RunDone || done.Result == nil || done.Result.OK == 0 {
				t.Errorf("the lab run: %+v, want it done, with sales", done)
			}
		})
	}
}

// A purchase retried with the same Idempotency-Key gets the same order,
// whether the retry comes after the first answer or while the first
// attempt is still in flight; another key for the same buyer is told which
// order the buyer has.
func TestSameKeySameOrderOverHTTP(t *testing.T) {
	srv := start(t, config(t, "", ""), app.Extras{})
	s := newSale(t, srv)
	s.reset(10, "none", "lua")
	first := s.buy(1, "key-1")
	again := s.buy(1, "key-1")
	other := s.buy(1, "key-2")
	if first.status != http.StatusCreated || again.status != http.StatusCreated || again.order != first.order {
		t.Errorf("a retry after the answer: %v then %v, want the same order twice", first, again)
	}
	if other.code != api.CodeAlreadyBought || other.order != first.order {
		t.Errorf("another key of the same buyer: %v, want already bought with order %s", other, first.order)
	}

	// In flight: the first attempt holds the shard's lock for 500ms (a lab
	// product's hold) when its retry arrives.
	units, one := 10, 1
	id := testenv.ProductID(t)
	if status, body := s.operator(srv.URL+"/api/products", api.ProductRequest{ID: &id, Stock: &units, Shards: &one,
		Lock: "token", Mode: "rmw", Lab: true}); status != http.StatusOK {
		t.Fatalf("creating a lab product: %d %s", status, body)
	}
	s.product = id
	p := s.read().p
	lockKey := stock.Layout{ID: id, Shards: p.Shards, Epoch: p.Epoch}.LockKey(0)
	user := int64(2)
	slow := api.OrderRequest{UserID: &user, ProductID: &id, HoldMS: 500}
	answers := make(chan outcome, 2)
	send := func() {
		o := outcome{user: user}
		status, body, err := post(context.Background(), s.client, srv.URL+"/api/orders", "key-in-flight", slow)
		o.status, o.err = status, err
		var ord api.Order
		if jsonUnmarshal(body, &ord) == nil {
			o.order = ord.ID
		}
		answers <- o
	}
	go send()
	waitFor(t, "the first attempt holding the lock", func() bool { return s.rdb.Exists(context.Background(), lockKey).Val() == 1 })
	go send()
	a, b := <-answers, <-answers
	if a.status != http.StatusCreated || b.status != http.StatusCreated || a.order != b.order || a.order == "" {
		t.Errorf("a purchase and its retry in flight: %v and %v, want the same order twice", a, b)
	}
	if st := s.checkPromise(nil); len(st.orders) != 1 {
		t.Errorf("%d orders for one purchase and its retry", len(st.orders))
	}
}

// A reset mid-burst starts a new sale: every order a client was told of
// (201) stays, in the sale it was made in, and the new sale's audit is
// exact — a purchase in flight across the reset lands in one sale or the
// other, never as a unit lost between them.
func TestResetMidBurst(t *testing.T) {
	srv := start(t, config(t, "", ""), app.Extras{})
	s := newSale(t, srv)
	s.reset(100, "token", "rmw")
	b := s.startBurst(300, 30)
	b.waitAnswered(t, 40)
	s.reset(100, "token", "rmw")
	outs := b.wait(t)
	s.reconcile()
	st := s.checkPromise(outs)
	if st.p.Sale != 2 {
		t.Fatalf("sale %d after one reset, want 2", st.p.Sale)
	}
	for _, o := range outs {
		if o.status != http.StatusCreated {
			continue
		}
		var ord api.Order
		s.getAs("/api/orders/"+o.order, mustToken(t, s.urls[0], o.user), &ord)
		if ord.UserID != o.user {
			t.Errorf("%v: order %+v", o, ord)
		}
	}
}
