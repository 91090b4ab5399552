package server_test

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"seckill/internal/app"
	"seckill/internal/testkit/testenv"
)

// BenchmarkHammerFromOneAddress is issue 36's finding 7 measured: one
// signed-in client at one address, 8 requests at a time, with the default
// address rate (50): purchases of one product that does not exist, of a
// new one each time, and reads of an order that does not exist. It
// reports the database's SELECTs a second the requests cost and the share
// of them refused 429.
func BenchmarkHammerFromOneAddress(b *testing.B) {
	cfg := testenv.Config(b)
	cfg.AddressRate = 50
	srv := testenv.Start(b, cfg, app.Extras{})
	token := testenv.SignIn(b, srv.URL, "hammer").Token
	var selects atomic.Int64
	name := "count_selects_" + b.Name()
	if err := srv.DB().Callback().Query().Before("gorm:query").Register(name, func(db *gorm.DB) { selects.Add(1) }); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.DB().Callback().Query().Remove(name) })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var next atomic.Int64
	next.Store(1 << 40)
	for _, c := range []struct {
		name, method, path string
		body               func() string
	}{
		{"missing product", "POST", "/api/orders", func() string { return `{"product_id": 999999999999}` }},
		{"a new missing product each", "POST", "/api/orders", func() string { return fmt.Sprintf(`{"product_id": %d}`, next.Add(1)) }},
		{"missing order", "GET", "/api/orders/123456789012345678", func() string { return "" }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var refused atomic.Int64
			selects.Store(0)
			start := time.Now()
			var wg sync.WaitGroup
			var sent atomic.Int64
			for range 8 {
				wg.Go(func() {
					for sent.Add(1) <= int64(b.N) {
						req, _ := http.NewRequest(c.method, srv.URL+c.path, bytes.NewReader([]byte(c.body())))
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("Authorization", "Bearer "+token)
						resp, err := client.Do(req)
						if err != nil {
							b.Error(err)
							return
						}
						resp.Body.Close()
						if resp.StatusCode == http.StatusTooManyRequests {
							refused.Add(1)
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start).Seconds()
			b.ReportMetric(float64(selects.Load())/elapsed, "selects/s")
			b.ReportMetric(float64(b.N)/elapsed, "req/s")
			b.ReportMetric(float64(refused.Load())/float64(b.N), "429/req")
		})
	}
}
