package faults_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/catalogue"
	"seckill/internal/order"
	"seckill/internal/stock"
	"seckill/internal/testkit/testenv"
)

// A process SIGKILLed while it holds claimed payment deadlines loses none:
// they come due again when the claims' lease ends, and the process left
// cancels every expired order, each unit back once (a cancel the dead
// process committed without its give-back is the reconciler's). The naive
// lifecycle's 20ms pause in each cancel keeps the claims held long enough
// to kill the process holding them.
func TestKilledExpirerLosesNoDeadline(t *testing.T) {
	const orders = 300
	r := ownRedis(t)
	cfg := config(t, r.Addr, "")
	if cfg.MySQLDSN == "" {
		cfg.SQLitePath = filepath.Join(t.TempDir(), "orders.db") // shared by both processes
	}
	product := testenv.ProductID(t)
	c := &http.Client{Timeout: time.Minute}
	postTo := func(url string, in any) (int, []byte) {
		status, body, err := post(t.Context(), c, url, "", in)
		if err != nil {
			t.Fatalf("POST %s: %v", url, err)
		}
		return status, body
	}
	operatorTo := func(url string, in any) (int, []byte) {
		status, body, err := postAs(t.Context(), c, url, testenv.AdminToken, in)
		if err != nil {
			t.Fatalf("POST %s: %v", url, err)
		}
		return status, body
	}

	// Process A sells, and its delay queue claims the deadlines.
	a := startChild(t, cfg)
	stockUnits, shards := orders, 1
	req := api.ProductRequest{ID: &product, Stock: &stockUnits, Shards: &shards, Mode: api.ModeLua, Lab: true,
		PayTimeoutMS: 1000, Lifecycle: catalogue.Naive}
	if status, body := operatorTo(a.URL+"/api/products", req); status != http.StatusOK {
		t.Fatalf("creating product %d: %d %s", product, status, body)
	}
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for u := range int64(orders) {
		wg.Go(func() {
			<-gate
			user := u + 1
			if status, body := postTo(a.URL+"/api/orders", api.OrderRequest{UserID: &user, ProductID: &product}); status != http.StatusCreated {
				t.Errorf("user %d buys: %d %s", user, status, body)
			}
		})
	}
	close(gate)
	wg.Wait()

	// Killed as soon as it holds claims: deadlines moved a lease past now.
	key := stock.DueKeyOf(product, 0)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	waitFor(t, "process A holding claimed deadlines", func() bool {
		n, err := rdb.ZCount(t.Context(), key, strconv.FormatInt(time.Now().Add(2*time.Second).UnixMilli(), 10), "+inf").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	a.Kill()
	killed := time.Now()

	// Process B, started after the kill.
	b := start(t, cfg, app.Extras{})
	var unpaid int64
	if err := b.DB().WithContext(t.Context()).Model(&order.Order{}).Where("product_id = ? AND status = ?", product, order.Unpaid).
		Count(&unpaid).Error; err != nil {
		t.Fatal(err)
	}
	if unpaid == 0 {
		t.Fatal("every order was cancelled before the kill: nothing shows the claims coming due again")
	}
	t.Logf("A killed with %d orders unpaid past their window", unpaid)
	audit := func() api.Audit {
		var au api.Audit
		resp, err := c.Get(fmt.Sprintf("%s/api/products/%d/audit", b.URL, product))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&au); err != nil {
			t.Fatal(err)
		}
		return au
	}
	waitFor(t, "every order cancelled", func() bool { return audit().Unpaid == 0 })
	// The lease, B's first polls and the cancels; measured, then bounded
	// loosely: a claim that never came due again would never end.
	took := time.Since(killed)
	t.Logf("every order cancelled %s after the kill (the lease is %s)", took.Round(time.Millisecond), order.DefaultDueLease)
	if took > order.DefaultDueLease+10*time.Second {
		t.Errorf("cancelled %s after the kill: want within the lease (%s) and the polling", took, order.DefaultDueLease)
	}
	waitFor(t, "a reconciliation with no take pending", func() bool {
		status, body := operatorTo(fmt.Sprintf("%s/api/products/%d/reconcile", b.URL, product), struct{}{})
		var rec api.Reconciliation
		return status == http.StatusOK && json.Unmarshal(body, &rec) == nil && rec.Pending == 0
	})
	if au := audit(); au.Cancelled != orders || au.Remaining != orders || au.Unsettled != 0 || au.Verdict != api.VerdictOK {
		t.Errorf("audit %+v: want all %d orders cancelled and every unit back, once", au, orders)
	}
}
