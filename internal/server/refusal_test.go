package server_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"seckill/internal/api"
	"seckill/internal/catalogue"
	"seckill/internal/testkit/testenv"
)

// TestRefusalsNeedNoBuyer: the answers every buyer of a product would get
// (sold out for good, not started, ended, no such product) come before the
// buyer's token is checked, so that the herd's refusals cost no signature
// check and no round trip. A request whose token is no token at all gets
// the product's refusal, not 401; a product on sale checks the token
// first; and a retry (an Idempotency-Key) of a sold-out product goes the
// long way, since only its buyer's record says whether its first attempt
// took a unit.
func TestRefusalsNeedNoBuyer(t *testing.T) {
	e := startDefault(t)
	forged := *e
	forged.buyer = "not-a-token"
	buy := func(e *env, id int64) (int, api.Error) {
		t.Helper()
		var out api.Error
		st := e.do("POST", "/api/orders", map[string]any{"product_id": id}, &out)
		return st, out
	}

	sold := e.reset(product{"stock": 1, "shards": 1, "lab": false})
	first := e.as("buyer 1")
	st, _, order := first.buyWithKey(first.buyer, sold, "key-1")
	if st != http.StatusCreated {
		t.Fatalf("the first buyer: status %d, want 201", st)
	}
	if st, out := buy(e.as("buyer 2"), sold); st != http.StatusConflict || out.Code != api.CodeSoldOut {
		t.Fatalf("the second buyer: status %d %+v, want 409 sold_out", st, out)
	}
	// The first buyer's answer was lost: its retry gets its order.
	if st, _, again := first.buyWithKey(first.buyer, sold, "key-1"); st != http.StatusCreated || again != order {
		t.Errorf("the first buyer's retry after the sell-out: status %d, order %s; want 201 and %s", st, again, order)
	}
	req, _ := http.NewRequest("POST", e.url+"/api/orders", strings.NewReader(fmt.Sprintf(`{"product_id":%d}`, sold)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer not-a-token")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || resp.Header.Get(api.HeaderSoldOut) != strconv.FormatInt(sold, 10) {
		t.Errorf("sold out, a forged token: status %d, %s %q; want 409 and the gate's header", resp.StatusCode, api.HeaderSoldOut, resp.Header.Get(api.HeaderSoldOut))
	}
	if st, _, _ := forged.buyWithKey("not-a-token", sold, "retry-1"); st != http.StatusUnauthorized {
		t.Errorf("sold out, a forged token retrying with a key: status %d, want 401 (a retry reads its record)", st)
	}

	onSale := e.reset(product{"stock": 10, "shards": 1, "lab": false})
	if st, _ := buy(e.as("buyer 3"), onSale); st != http.StatusCreated {
		t.Fatalf("a product on sale: status %d, want 201", st)
	}
	if st, _ := buy(&forged, onSale); st != http.StatusUnauthorized {
		t.Errorf("on sale, a forged token: status %d, want 401", st)
	}

	opens := time.Now().Add(time.Hour)
	early := e.reset(product{"stock": 10, "shards": 1, "lab": false, "starts_at": opens})
	if st, out := buy(e.as("buyer 4"), early); st != http.StatusConflict || out.Code != api.CodeNotStarted {
		t.Fatalf("not started: status %d %+v, want 409 not_started", st, out)
	}
	if st, out := buy(&forged, early); st != http.StatusConflict || out.Code != api.CodeNotStarted || out.StartsAt == nil {
		t.Errorf("not started, a forged token: status %d %+v, want 409 not_started with starts_at", st, out)
	}

	ended := e.reset(product{"stock": 10, "shards": 1, "lab": false,
		"starts_at": time.Now().Add(-time.Hour), "ends_at": time.Now().Add(-time.Minute)})
	if st, out := buy(e.as("buyer 5"), ended); st != http.StatusConflict || out.Code != api.CodeSaleEnded {
		t.Fatalf("ended: status %d %+v, want 409 sale_ended", st, out)
	}
	if st, out := buy(&forged, ended); st != http.StatusConflict || out.Code != api.CodeSaleEnded {
		t.Errorf("ended, a forged token: status %d %+v, want 409 sale_ended", st, out)
	}

	// A product found missing is answered missing without a read for
	// catalogue.MissTTL: the forged token meets that answer within it.
	missing := testenv.ProductID(t)
	somebody := e.as("buyer 6")
	read := time.Now()
	if st, _ := buy(somebody, missing); st != http.StatusNotFound {
		t.Fatalf("no such product: status %d, want 404", st)
	}
	if st, _ := buy(&forged, missing); st != http.StatusNotFound && time.Since(read) < catalogue.MissTTL {
		t.Errorf("no such product (read a moment ago), a forged token: status %d, want 404", st)
	}
}
