package order

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"seckill/internal/stock"
)

// told counts the orders this process told its buyers of (201, and the
// async mode's 202), per product and sale, and writes the counts to Redis
// beside the stock (stock.ToldKey), where the audit sums every process's
// and compares them with the rows: a lost acknowledgement shows even when
// the units balance. A count is written whole and again whenever Redis
// may have lost it (a new connection: a failover, a restart), so it
// outlives what Redis forgets; a process that dies loses the counts it
// had not written yet, which makes the sum a lower bound, never too high.
type told struct {
	w     toldWriter
	name  string        // this process's field in each sale's hash
	every time.Duration // how often changed counts are written
	step  time.Duration // bounds one write
	log   *slog.Logger

	mu     sync.Mutex
	counts map[saleOf]int64
	dirty  map[saleOf]bool
}

// saleOf names a product's sale.
type saleOf struct{ product, sale int64 }

// toldWriter writes the counts (stock.Ledgers).
type toldWriter interface {
	WriteTold(ctx context.Context, name string, counts []stock.Told) error
}

// toldEvery is how often the changed counts are written: one round trip
// for all of them, however many purchases a burst answers meanwhile.
const toldEvery = 200 * time.Millisecond

func newTold(w toldWriter, name string, step time.Duration, log *slog.Logger) *told {
	return &told{w: w, name: name, every: toldEvery, step: step, log: log,
		counts: make(map[saleOf]int64), dirty: make(map[saleOf]bool)}
}

// add counts an order told of.
func (t *told) add(product, sale int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := saleOf{product, sale}
	t.counts[k]++
	t.dirty[k] = true
}

// rewrite has every count written again: Redis may have lost them.
func (t *told) rewrite() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.counts {
		t.dirty[k] = true
	}
}

// run writes the changed counts every t.every until stop is closed, then
// once more.
func (t *told) run(stop <-chan struct{}) {
	tick := time.NewTicker(t.every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			t.flush()
			return
		case <-tick.C:
			t.flush()
		}
	}
}

// flush writes the changed counts; what fails stays changed.
func (t *told) flush() {
	t.mu.Lock()
	var counts []stock.Told
	for k := range t.dirty {
		counts = append(counts, stock.Told{Product: k.product, Sale: k.sale, N: t.counts[k]})
	}
	clear(t.dirty)
	t.mu.Unlock()
	if len(counts) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.step)
	defer cancel()
	if err := t.w.WriteTold(ctx, t.name, counts); err != nil {
		t.log.Warn("the counts of orders told were not written; written again next time", "error", err)
		t.mu.Lock()
		for _, c := range counts {
			t.dirty[saleOf{c.Product, c.Sale}] = true
		}
		t.mu.Unlock()
	}
}
