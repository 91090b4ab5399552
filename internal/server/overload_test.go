package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"seckill/internal/admission"
	"seckill/internal/api"
	"seckill/internal/testkit/testenv"
)

// buyHeader buys and returns the status, the error code and the named header.
func (e *env) buyHeader(body map[string]any, header string) (int, string, string) {
	e.t.Helper()
	buf, err := json.Marshal(body)
	if err != nil {
		e.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, e.url+"/api/orders", bytes.NewReader(buf))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", api.MediaType)
	if e.buyer != "" {
		req.Header.Set("Authorization", "Bearer "+e.buyer)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var ae api.Error
	_ = json.NewDecoder(resp.Body).Decode(&ae) // a 201's body has no code
	return resp.StatusCode, ae.Code, resp.Header.Get(header)
}

// With the concurrency limit full, a purchase of a product on sale is 503
// overloaded with Retry-After, at once; what the service refuses without
// the stock is refused as before (bad input 400, a rate-limited buyer 429,
// a product known sold out 409), and a lab purchase is not shed. /metrics
// counts what was admitted and shed.
func TestOverloadedIs503WithRetryAfter(t *testing.T) {
	cfg := testenv.Config(t)
	cfg.ConcurrencyLimit = 1
	cfg.RateLimit = time.Minute
	e := start(t, cfg)
	onSale := e.reset(product{"stock": 10, "shards": 1, "lab": false})
	soldOut := e.reset(product{"stock": 1, "shards": 1, "lab": false})
	lab := e.reset(product{"stock": 10, "shards": 1})
	base := testenv.ProductID(t) // buyer names no other run of the test uses
	rdb := e.srv.Redis()
	buyers := make(map[int64]*env)
	as := func(n int64) *env {
		if buyers[n] == nil {
			s := testenv.SignIn(t, e.url, fmt.Sprintf("overload-%d", n))
			t.Cleanup(func() {
				rdb.Del(context.Background(), admission.PerBuyerKey(s.BuyerID, onSale), admission.PerBuyerKey(s.BuyerID, soldOut))
			})
			c := *e
			c.buyer = s.Token
			buyers[n] = &c
		}
		return buyers[n]
	}
	// who buys: a signed-in buyer on a product that is not a lab product,
	// a user id on the lab one.
	type who struct {
		e    *env
		body map[string]any
	}
	buy := func(user, product int64) who {
		if product == lab { // ids below 2^41: a lab product's user ids
			t.Cleanup(func() { rdb.Del(context.Background(), admission.PerBuyerKey(user, product)) })
			return who{e, map[string]any{"user_id": user, "product_id": product}}
		}
		return who{as(user), map[string]any{"product_id": product}}
	}
	buyHeader := func(w who, header string) (int, string, string) { return w.e.buyHeader(w.body, header) }
	if st, _, _ := buyHeader(buy(base+1, soldOut), ""); st != http.StatusCreated {
		t.Fatalf("the last unit: status %d", st)
	}
	if st, code, _ := buyHeader(buy(base+2, soldOut), ""); st != http.StatusConflict || code != api.CodeSoldOut {
		t.Fatalf("after the last unit: %d %s, want 409 sold_out", st, code)
	}

	// One purchase in flight fills the limit: it waits for the shard's lock,
	// which the test holds.
	lockKey := fmt.Sprintf("seckill:lock:{%d_0}", onSale)
	if err := rdb.Set(t.Context(), lockKey, "held by the test", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), lockKey) })
	first := make(chan int, 1)
	go func() {
		st, _, _ := buyHeader(buy(base+3, onSale), "")
		first <- st
	}()
	e.eventually("the first purchase in flight", func() bool {
		return strings.Contains(e.getMetrics(), "seckill_admission_in_flight 1\n")
	})

	st, code, retry := buyHeader(buy(base+4, onSale), "Retry-After")
	if st != http.StatusServiceUnavailable || code != api.CodeOverloaded || retry != "1" {
		t.Errorf("a purchase beyond the limit: %d %s Retry-After %q, want 503 overloaded Retry-After 1", st, code, retry)
	}
	for _, c := range []struct {
		name   string
		body   who
		status int
		code   string
	}{
		{"bad input", who{as(base + 4), map[string]any{"product_id": onSale, "hold_ms": -1}}, http.StatusBadRequest, api.CodeBadRequest},
		{"a rate-limited buyer", buy(base+3, onSale), http.StatusTooManyRequests, api.CodeRateLimited},
		{"a product known sold out", buy(base+5, soldOut), http.StatusConflict, api.CodeSoldOut},
		{"a lab product", buy(base+6, lab), http.StatusCreated, ""},
	} {
		if st, code, _ := buyHeader(c.body, ""); st != c.status || code != c.code {
			t.Errorf("%s with the limit full: %d %q, want %d %q", c.name, st, code, c.status, c.code)
		}
	}

	rdb.Del(t.Context(), lockKey)
	if st := <-first; st != http.StatusCreated {
		t.Errorf("the purchase in flight, once the lock was free: status %d, want 201", st)
	}
	metrics := e.getMetrics()
	for _, want := range []string{
		"seckill_admission_admitted_total 3\n", // the two of the sold-out product and the first
		"seckill_admission_shed_total 1\n",
		"seckill_admission_limit 1\n",
		"seckill_admission_in_flight 0\n",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
