package order_test

import (
	"context"
	"sync/atomic"
	"testing"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/catalogue"
	"seckill/internal/order"
	"seckill/internal/testkit/testenv"
)

// BenchmarkBuy measures one purchase through the order service — take a
// unit, draw an id, write the order — in each mode, from parallel buyers
// (GOMAXPROCS goroutines) on one 5-shard product. It runs on the real
// servers when REDIS_ADDR and MYSQL_DSN are set, on the embedded ones
// otherwise; the numbers are only comparable within one run.
func BenchmarkBuy(b *testing.B) {
	for _, bc := range []struct{ name, lock, mode string }{
		{"rmw-none", "none", "rmw"},
		{"rmw-local", "local", "rmw"},
		{"rmw-token", "token", "rmw"},
		{"lua", "none", "lua"},
		{"db", "none", "db"},
		{"async", "none", "async"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := testenv.Config(b)
			a, err := app.Open(context.Background(), cfg, nil, app.Extras{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { a.Close() })
			id := testenv.ProductID(b)
			// Every purchase leaves its buyer's key: a shared Redis keeps
			// none of them past the benchmark.
			b.Cleanup(func() { testenv.DropProductKeys(b, a.RedisAddr(), id) })
			// A Redis that keeps nothing takes async on a lab product only.
			spec := catalogue.ProductSpec{ID: id, Stock: catalogue.MaxStock, Lock: bc.lock, Mode: bc.mode, Lab: bc.mode == "async"}
			_, err = a.Orders.Catalogue().Reset(b.Context(), spec)
			if err != nil {
				b.Fatal(err)
			}
			var user atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, _, err := a.Orders.Buy(context.Background(), order.Purchase{UserID: user.Add(1), ProductID: id})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			if _, au, err := a.Reconciler.Audit(context.Background(), id); err != nil || au.Verdict != api.VerdictOK && bc.lock != "none" {
				b.Errorf("audit %+v, %v", au, err)
			}
		})
	}
}
