package faults_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/testkit"
	"seckill/internal/testkit/child"
)

// TestQueuedOrderIsItsBuyersOnly: an order of a product that is not a lab
// product, queued (async, 202) and not written yet, is its buyer's as a
// written one is: another buyer reading, paying or cancelling it gets 404,
// nobody without a token 401; its buyer reads it pending. The consumer is
// off, so that it stays queued; the Redis keeps an append-only file, on
// which such a product may be async.
func TestQueuedOrderIsItsBuyersOnly(t *testing.T) {
	r, err := child.StartRedisWith(t.Context(), exe(t), t.TempDir(), os.Stderr, child.AOFEverysec)
	if err != nil {
		testkit.Skipf(t, testkit.NoRedisServer, "needs redis-server on PATH, for its append-only file: %v", err)
	}
	t.Cleanup(func() { r.Kill() })
	cfg := config(t, r.Addr, "")
	cfg.Consume = false
	srv := start(t, cfg, app.Extras{})
	s := newSale(t, srv)
	units := 5
	if status, body := s.operator(s.urls[0]+"/api/products", api.ProductRequest{ID: &s.product, Stock: &units, Mode: api.ModeAsync}); status != http.StatusOK {
		t.Fatalf("creating a non-lab async product: %d %s", status, body)
	}
	const alice, bob = 1, 2
	o := buy(t.Context(), s.client, s.urls[0], s.product, alice, "queued-1")
	if o.status != http.StatusAccepted {
		t.Fatalf("alice buys: %v, want 202", o)
	}
	// ask sends a request of the buyer of token ("" for none): a POST with
	// an empty object, a GET with no body.
	ask := func(method, path, token string) (int, api.Order) {
		t.Helper()
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader("{}")
		}
		req, err := http.NewRequestWithContext(t.Context(), method, s.urls[0]+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", api.MediaType)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got api.Order
		_ = json.NewDecoder(resp.Body).Decode(&got)
		return resp.StatusCode, got
	}
	path := "/api/orders/" + o.order
	for _, tc := range []struct {
		what, method, path, token string
		want                      int
	}{
		{"bob reads it", http.MethodGet, path, mustToken(t, s.urls[0], bob), http.StatusNotFound},
		{"bob pays it", http.MethodPost, path + "/pay", mustToken(t, s.urls[0], bob), http.StatusNotFound},
		{"bob cancels it", http.MethodPost, path + "/cancel", mustToken(t, s.urls[0], bob), http.StatusNotFound},
		{"nobody reads it", http.MethodGet, path, "", http.StatusUnauthorized},
		{"alice pays it before its row", http.MethodPost, path + "/pay", mustToken(t, s.urls[0], alice), http.StatusConflict},
	} {
		if status, _ := ask(tc.method, tc.path, tc.token); status != tc.want {
			t.Errorf("%s: %d, want %d", tc.what, status, tc.want)
		}
	}
	if status, got := ask(http.MethodGet, path, mustToken(t, s.urls[0], alice)); status != http.StatusOK || got.Status != "pending" || got.UserID != alice {
		t.Errorf("alice reads her queued order: %d %+v, want it pending", status, got)
	}
}
