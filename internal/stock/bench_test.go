package stock_test

import (
	"context"
	"io"
	"testing"
	"time"

	"seckill/internal/lock"
	"seckill/internal/stock"
	"seckill/internal/testkit"
	"seckill/internal/testkit/testenv"
)

// BenchmarkRMWGuard is the cost of the guarded rmw write (Product.Guarded)
// against the unchecked one, in one run: under token, the write script's
// GET of the lock key; under none, the token drawn at the read (a script
// instead of a GET). Each iteration is one take of each, for one buyer, on
// a shard of its own of a redis-server.
func BenchmarkRMWGuard(b *testing.B) {
	if !testkit.HaveRedisServer() {
		b.Skip("redis-server is not on PATH: miniredis's timings would say nothing about Redis's")
	}
	rdb := testkit.RedisNodes(b, 1)[0].Client
	s := stock.NewStore(rdb, nil)
	for _, name := range []string{"token", "none"} {
		l, err := lock.New(name, lock.Backends{Redis: rdb})
		if err != nil {
			b.Fatal(err)
		}
		if c, ok := l.(io.Closer); ok {
			b.Cleanup(func() { c.Close() })
		}
		b.Run(name, func(b *testing.B) {
			// The two writes alternate, so that the machine's load, which
			// drifts, weighs on both alike.
			ctx := context.Background()
			var reqs [2]stock.Request
			for i, guard := range []bool{false, true} {
				p := stock.Product{Layout: stock.Layout{ID: testenv.ProductID(b), Shards: 1, Epoch: 1}, Where: stock.InRedis, Guarded: guard}
				const units = 1 << 30
				if err := s.LayOut(ctx, p, []int{units}, units); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { s.Drop(context.Background(), p.Layout) })
				reqs[i] = stock.Request{Product: p, Taker: stock.RMW{Locked: stock.Locked{Locker: l}}}
			}
			var spent [2]time.Duration
			user := int64(0)
			for b.Loop() {
				user++
				for i := range reqs {
					reqs[i].Ticket = ticket(user)
					start := time.Now()
					if _, err := s.Take(ctx, reqs[i]); err != nil {
						b.Fatal(err)
					}
					spent[i] += time.Since(start)
				}
			}
			n := float64(b.N)
			b.ReportMetric(float64(spent[0].Nanoseconds())/n, "unchecked-ns/take")
			b.ReportMetric(float64(spent[1].Nanoseconds())/n, "guarded-ns/take")
			b.ReportMetric(float64(spent[1])/float64(spent[0]), "guarded/unchecked")
		})
	}
}
