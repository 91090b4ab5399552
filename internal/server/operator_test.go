package server_test

import (
	"fmt"
	"net/http"
	"testing"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/lab"
	"seckill/internal/testkit/testenv"
)

// TestOnlyTheOperatorChangesASale: with the default configuration (no
// ADMIN_TOKEN), the service makes an operator token at start and keeps it in
// Redis, where a second instance finds it; without it nobody creates,
// resets or changes a product, reconciles or starts a lab run (401), with it
// the operator does; buyers need none. A re-POST of a product that is not a
// lab product neither starts a new sale nor changes its lock: only
// "reset": true does.
func TestOnlyTheOperatorChangesASale(t *testing.T) {
	cfg := testenv.Config(t)
	cfg.AdminToken = "" // the default: the service makes one
	e := startWith(t, cfg, app.Extras{Runs: lab.New(lab.Options{Run: instant})})
	token := e.srv.Config.AdminToken
	if token == "" {
		t.Fatal("the service started without ADMIN_TOKEN has no operator token")
	}
	second := cfg
	second.RedisAddr = e.srv.RedisAddr()
	if other := testenv.Start(t, second, app.Extras{}); other.Config.AdminToken != token {
		t.Errorf("a second instance on the same Redis has token %q, want the first's", other.Config.AdminToken)
	}

	id := testenv.ProductID(t)
	t.Cleanup(func() { testenv.DropProductKeys(t, e.srv.RedisAddr(), id) })
	sold := product{"id": id, "stock": 10, "shards": 1, "lock": "token", "mode": "rmw"}
	run := map[string]any{"lock": "token", "mode": "rmw", "stock": 5, "buyers": 5, "concurrency": 1}
	reconcile := fmt.Sprintf("/api/products/%d/reconcile", id)
	operatorCalls := []struct {
		what, path string
		body       any
		ok         int
	}{
		{"create", "/api/products", sold, http.StatusOK},
		{"reset", "/api/products", product{"id": id, "stock": 10, "shards": 1, "lock": "token", "mode": "rmw", "reset": true}, http.StatusOK},
		{"change the lock", "/api/products", product{"id": id, "stock": 10, "shards": 1, "lock": "fenced", "mode": "rmw", "reset": true}, http.StatusOK},
		{"reconcile", reconcile, map[string]any{}, http.StatusOK},
		{"start a lab run", "/api/runs", run, http.StatusAccepted},
	}
	for _, bearer := range []string{"", "not-" + token} {
		e.token = bearer
		for _, c := range operatorCalls {
			var ae api.Error
			if st := e.do("POST", c.path, c.body, &ae); st != http.StatusUnauthorized || ae.Code != api.CodeUnauthorized {
				t.Errorf("%s with bearer %q: %d %+v, want 401 unauthorized", c.what, bearer, st, ae)
			}
		}
	}
	var ae api.Error
	if st := e.do("GET", fmt.Sprintf("/api/products/%d", id), nil, &ae); st != http.StatusNotFound {
		t.Fatalf("the product after the refused creations: %d %+v, want 404", st, ae)
	}
	e.token = token
	for _, c := range operatorCalls {
		var ae api.Error
		if st := e.do("POST", c.path, c.body, &ae); st != c.ok {
			t.Errorf("the operator's %s: %d %+v, want %d", c.what, st, ae, c.ok)
		}
	}

	// A buyer sends no operator token (e.do sends it only on the
	// operator's paths), the buyer's own.
	var o api.Order
	if st := e.as("buyer").do("POST", "/api/orders", map[string]any{"product_id": id}, &o); st != http.StatusCreated {
		t.Errorf("a buyer without the operator token: %d, want 201", st)
	}

	// A re-POST that looks like a create starts no new sale (issue 36: one
	// click on Reset sold the units again), even under the same lock and
	// mode, nor changes how the sale is sold.
	if st := e.do("POST", "/api/products", product{"id": id, "stock": 10, "shards": 1, "lock": "fenced", "mode": "rmw"}, &ae); st != http.StatusConflict || ae.Code != api.CodeResetRequired {
		t.Errorf("a re-POST as it is: %d %+v, want 409 reset_required", st, ae)
	}
	if st := e.do("POST", "/api/products", product{"id": id, "stock": 10, "shards": 1, "lock": "none", "mode": "rmw"}, &ae); st != http.StatusConflict || ae.Code != api.CodeResetRequired {
		t.Errorf("a re-POST with lock none: %d %+v, want 409 reset_required", st, ae)
	}
	if st := e.do("POST", "/api/products", product{"id": id, "stock": 10, "shards": 1, "lock": "fenced", "mode": "lua"}, &ae); st != http.StatusConflict || ae.Code != api.CodeResetRequired {
		t.Errorf("a re-POST with mode lua: %d %+v, want 409 reset_required", st, ae)
	}
	var v api.ProductView
	if st := e.do("GET", fmt.Sprintf("/api/products/%d", id), nil, &v); st != http.StatusOK || v.Lock != "fenced" || v.Mode != "rmw" || v.Sold != 1 || v.Sale != 3 || v.Stock != 9 {
		t.Errorf("the product after the refused re-POSTs: %d %+v, want lock fenced, mode rmw, sale 3, 1 sold, 9 in stock", st, v)
	}
	if st := e.do("POST", "/api/products", product{"id": id, "stock": 10, "shards": 1, "lock": "none", "mode": "rmw", "reset": true}, &v); st != http.StatusOK || v.Lock != "none" {
		t.Errorf("the operator's explicit reset to lock none: %d %+v, want 200 with lock none", st, v)
	}
}
