package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/lock"
	"seckill/internal/testkit/testenv"
)

// buyWithKey sends one purchase of the buyer of token with an
// Idempotency-Key and returns the status, the error code and the order id
// (of the order or the refusal).
func (e *env) buyWithKey(token string, product int64, key string) (int, string, string) {
	e.t.Helper()
	body, err := json.Marshal(map[string]any{"product_id": product})
	if err != nil {
		e.t.Fatal(err)
	}
	req, err := http.NewRequest("POST", e.url+"/api/orders", bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(api.HeaderIdempotencyKey, key)
	req.Header.Set("Authorization", "Bearer "+token)
	var out struct {
		ID      string `json:"id"`
		Code    string `json:"code"`
		OrderID string `json:"order_id"`
	}
	st := e.send(req, &out)
	return st, out.Code, out.ID + out.OrderID
}

// One Idempotency-Key sent by 400 buyers at once is 400 purchases, not one
// purchase retried: under every lock a product that is not a lab product
// may be sold with, 100 units make exactly 100 orders. The client's key used
// to be the reentrant lock's owner, so every buyer re-entered the first
// holder's lock and the read-modify-writes overlapped (issue 19: 259 orders
// for 100 units).
func TestSharedIdempotencyKeyIsNotSharedByBuyers(t *testing.T) {
	const buyers, units, key = 400, 100, "shared-key"
	cfg := testenv.Config(t)
	// 400 purchases queue on one shard's lock: the test is about the
	// count, not the wait (etcd hands the lock on through a watch).
	cfg.LockWait = 20 * time.Second
	e := start(t, cfg)
	// Buyers of a product that is not a lab product sign in.
	tokens := make([]string, buyers+1)
	for i := 1; i <= buyers; i++ {
		tokens[i] = testenv.SignIn(t, e.url, fmt.Sprintf("buyer %d", i)).Token
	}
	for _, l := range lock.Strategies() {
		t.Run(l.Name, func(t *testing.T) {
			if l.Name == "none" {
				t.Skip("lock none loses updates with any keys: that is its lesson, not the key's")
			}
			e := &env{t: t, url: e.url, srv: e.srv, client: e.client, token: e.token}
			id := testenv.ProductID(t)
			var ae api.Error
			p := product{"id": id, "stock": units, "shards": 1, "lock": l.Name, "mode": "rmw", "lab": false}
			switch st := e.do("POST", "/api/products", p, &ae); st {
			case http.StatusOK:
			case http.StatusBadRequest:
				// Only a server this machine lacks may refuse a lock; any
				// other refusal is a failure, not a lock left untried.
				if why := missingBackend(l.Name, cfg); why != "" {
					t.Skipf("lock %s: %s (refused: %s)", l.Name, why, ae.Error)
				}
				t.Fatalf("the catalogue refused lock %s with its backends here: %s", l.Name, ae.Error)
			default:
				t.Fatalf("creating product %d: status %d %+v", id, st, ae)
			}
			t.Cleanup(func() { testenv.DropProductKeys(t, e.srv.RedisAddr(), id) })

			type answer struct {
				status      int
				code, order string
			}
			got := make([]answer, buyers)
			gate := make(chan struct{})
			var wg sync.WaitGroup
			for i := range buyers {
				wg.Go(func() {
					<-gate
					// A 503 is no answer to count (a slow lock under -race
					// and 400 buyers): the buyer retries with its key, as
					// a client would, and the retry replays or buys.
					for try := 0; ; try++ {
						st, code, order := e.buyWithKey(tokens[i+1], id, key)
						got[i] = answer{st, code, order}
						if st != http.StatusServiceUnavailable || try == 20 {
							return
						}
					}
				})
			}
			close(gate)
			wg.Wait()

			created, soldOut := 0, 0
			others := map[string]int{}
			for _, a := range got {
				switch {
				case a.status == http.StatusCreated:
					created++
				case a.status == http.StatusConflict && a.code == api.CodeSoldOut:
					soldOut++
				default:
					others[fmt.Sprintf("%d %s", a.status, a.code)]++
				}
			}
			if created != units || soldOut != buyers-units {
				t.Errorf("%d buyers got 201 and %d sold_out, want %d and %d; others: %v", created, soldOut, units, buyers-units, others)
			}
			want := api.Audit{ProductID: id, Initial: units, Remaining: 0, Taken: units, Orders: units, Verdict: api.VerdictOK}
			if a := e.audit(id); !reflect.DeepEqual(a, want) {
				t.Errorf("audit = %+v, want %+v", a, want)
			}
			// Two buyers, one key, on a product with stock to spare: two
			// orders, and each buyer's retry with the key replays its own.
			small := testenv.ProductID(t)
			p = product{"id": small, "stock": 3, "shards": 1, "lock": l.Name, "mode": "rmw", "lab": false}
			if st := e.do("POST", "/api/products", p, nil); st != http.StatusOK {
				t.Fatalf("creating product %d: status %d", small, st)
			}
			t.Cleanup(func() { testenv.DropProductKeys(t, e.srv.RedisAddr(), small) })
			first := map[int]string{}
			for _, user := range []int{1, 2, 1, 2} {
				st, code, order := e.buyWithKey(tokens[user], small, key)
				if st != http.StatusCreated {
					t.Errorf("buyer %d with key %s: %d %s, want 201", user, key, st, code)
					continue
				}
				if prior, ok := first[user]; ok && order != prior {
					t.Errorf("buyer %d's retry: order %s, want its first order %s", user, order, prior)
				}
				first[user] = order
			}
			if first[1] == first[2] {
				t.Errorf("buyers 1 and 2 were both given order %s", first[1])
			}
		})
	}
}

// missingBackend says which server lock name needs that cfg does not
// give, or "" when it has what it needs.
func missingBackend(name string, cfg app.Config) string {
	switch {
	case name == "redlock" && len(cfg.RedisAddrs) == 0:
		return "no independent Redis nodes (REDIS_ADDRS)"
	case name == "mysql" && cfg.MySQLDSN == "":
		return "no MySQL (MYSQL_DSN): SQLite has no GET_LOCK"
	}
	return ""
}
