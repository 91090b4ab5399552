package server_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"seckill/internal/app"
	"seckill/internal/testkit/testenv"
)

// BenchmarkPurchaseSignedIn is one purchase through the handler by a
// signed-in buyer of a product that is not a lab product (the token
// verified on each), beside the same by a user id in the body of a lab
// product, and beside a token on a lab product: what sessions cost a
// purchase. Both in the lua mode, one buyer per purchase (a numbered buyer
// with an account, testenv.Accounts), on testenv's backends (REDIS_ADDR
// and MYSQL_DSN when set).
func BenchmarkPurchaseSignedIn(b *testing.B) {
	srv := startSigning(b)
	// token-lab is a token on a lab product: the token's cost alone. Each
	// purchase is a buyer of its own (next counts across every round),
	// whose account is marked in Redis as a sign-in marks it: the token's
	// account is read in the MGET of its session's revocation, no SQL.
	var next int64
	for _, tc := range []struct {
		name       string
		lab, token bool
	}{{"token", false, true}, {"token-lab", true, true}, {"user_id", true, false}} {
		b.Run(tc.name, func(b *testing.B) {
			id := testenv.ProductID(b)
			p := fmt.Sprintf(`{"id":%d,"stock":%d,"shards":5,"mode":"lua","lab":%v}`, id, b.N+1, tc.lab)
			if rec := post(srv.Handler, "/api/products", p, srv.Config.AdminToken); rec.Code != http.StatusOK {
				b.Fatalf("creating product %d: %d %s", id, rec.Code, rec.Body)
			}
			b.Cleanup(func() { testenv.DropProductKeys(b, srv.RedisAddr(), id) })
			bodies, tokens, users := make([]string, b.N), make([]string, b.N), make([]int64, b.N)
			for i := range b.N {
				next++
				users[i] = next
				if !tc.token {
					bodies[i] = fmt.Sprintf(`{"user_id":%d,"product_id":%d}`, next, id)
				} else {
					bodies[i], tokens[i] = fmt.Sprintf(`{"product_id":%d}`, id), testenv.Token(next)
				}
			}
			if tc.token {
				testenv.Accounts(b, srv, users...)
			}
			b.ResetTimer()
			for i := range b.N {
				if rec := post(srv.Handler, "/api/orders", bodies[i], tokens[i]); rec.Code != http.StatusCreated {
					b.Fatalf("purchase %d: %d %s", i, rec.Code, rec.Body)
				}
			}
		})
	}
}

// startSigning starts a service that signs buyers in with testenv's
// secret (testenv.Token), logging errors only.
func startSigning(b *testing.B) *app.Server {
	cfg := testenv.Config(b)
	cfg.SessionSecret = testenv.SessionSecret
	cfg.LogLevel = "error"
	return testenv.Start(b, cfg, app.Extras{})
}

// post sends a JSON POST straight to the handler, as if to the loopback
// address it listens on, with token as the bearer when not "".
func post(h http.Handler, path, body, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Host = "127.0.0.1"
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}
