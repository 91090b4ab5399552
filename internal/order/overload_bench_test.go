package order_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"seckill/internal/admission"
	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/catalogue"
	"seckill/internal/order"
	"seckill/internal/testkit/testenv"
)

// BenchmarkBuyOverload is issue 21's overload run without HTTP: the closed
// loop's capacity (128 buyers buying as fast as they can for 5s after a
// second's warm-up, the limit off), then an open loop at three times that for 10s against the service with
// the concurrency limit off and on, each purchase's latency counted from
// its due time. The load is bounded as loadtest's -rate is (2,000 senders:
// a request due while all are busy waits for one). It reports, per run,
// the goodput (sales per second from the first due time to the last
// answer), how long that took, the sales' p50 and p99, the sheds and the
// other errors, and checks the audit. Run it once (-benchtime 1x): every
// figure is for the run, not per b.N.
//
//	go test -run '^$' -bench BuyOverload -benchtime 1x ./internal/order/
func BenchmarkBuyOverload(b *testing.B) {
	const senders, openFor = 2000, 10 * time.Second
	a, id := overloadSale(b, 0)
	closedLoop(a, id, 128, time.Second) // warm-up: pools, id blocks
	capacity := closedLoop(a, id, 128, 5*time.Second)
	for _, limit := range []int{0, 200} {
		b.Run("limit="+strconv.Itoa(limit), func(b *testing.B) {
			a, id := overloadSale(b, limit)
			r := openLoop(a, id, 3*capacity, openFor, senders)
			b.ReportMetric(capacity, "capacity/s")
			b.ReportMetric(float64(len(r.sold))/r.took.Seconds(), "goodput/s")
			b.ReportMetric(r.took.Seconds(), "took-s")
			b.ReportMetric(pct(r.sold, 50), "p50-ms")
			b.ReportMetric(pct(r.sold, 99), "p99-ms")
			b.ReportMetric(float64(r.shed), "shed")
			b.ReportMetric(float64(r.errors), "errors")
			if _, au, err := a.Reconciler.Audit(context.Background(), id); err != nil || au.Verdict != api.VerdictOK {
				b.Errorf("audit %+v, %v", au, err)
			}
		})
	}
}

// overloadSale opens the service with the limit's ceiling (0 off) and lays
// out a product sold to the public in the lua mode, with more stock than
// any run sells.
func overloadSale(b *testing.B, limit int) (*app.App, int64) {
	cfg := testenv.Config(b)
	cfg.ConcurrencyLimit, cfg.LogLevel = limit, "error"
	a, err := app.Open(context.Background(), cfg, nil, app.Extras{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	id := testenv.ProductID(b)
	b.Cleanup(func() { testenv.DropProductKeys(b, a.RedisAddr(), id) })
	spec := catalogue.ProductSpec{ID: id, Stock: catalogue.MaxStock, Lock: "none", Mode: api.ModeLua}
	if _, err := a.Orders.Catalogue().Reset(b.Context(), spec); err != nil {
		b.Fatal(err)
	}
	return a, id
}

var buyer atomic.Int64 // every purchase a new buyer, across the runs

// closedLoop returns the sales per second of n buyers buying back to back.
func closedLoop(a *app.App, id int64, n int, d time.Duration) float64 {
	var sold atomic.Int64
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for time.Now().Before(end) {
				if _, _, err := a.Orders.Buy(context.Background(), order.Purchase{UserID: buyer.Add(1), ProductID: id}); err == nil {
					sold.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return float64(sold.Load()) / d.Seconds()
}

type overloadRun struct {
	sold         []time.Duration // the sales' latencies from their due times
	shed, errors int
	took         time.Duration // from the first due time to the last answer
}

// openLoop sends rate purchases a second for d from n senders.
func openLoop(a *app.App, id int64, rate float64, d time.Duration, n int) overloadRun {
	total := int64(rate * d.Seconds())
	var next atomic.Int64
	var mu sync.Mutex
	var run overloadRun
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			var mine overloadRun
			for i := next.Add(1) - 1; i < total; i = next.Add(1) - 1 {
				due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
				time.Sleep(time.Until(due)) // pacing the loop, not waiting for a condition
				_, _, err := a.Orders.Buy(context.Background(), order.Purchase{UserID: buyer.Add(1), ProductID: id})
				switch {
				case err == nil:
					mine.sold = append(mine.sold, time.Since(due))
				case errors.Is(err, admission.ErrOverloaded):
					mine.shed++
				default:
					mine.errors++
				}
			}
			mu.Lock()
			run.sold = append(run.sold, mine.sold...)
			run.shed += mine.shed
			run.errors += mine.errors
			mu.Unlock()
		})
	}
	wg.Wait()
	run.took = time.Since(start)
	return run
}

// pct is the p-th percentile of ds in milliseconds.
func pct(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return float64(ds[(len(ds)-1)*p/100]) / float64(time.Millisecond)
}
