package order

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"seckill/internal/catalogue"
	"seckill/internal/idgen"
	"seckill/internal/stock"
)

// Consumer writes the async mode's queued orders to the database: one per
// process, all in one consumer group, each under a name of its own. It
// reads a batch from every stream, writes the batch in one transaction,
// inserting only orders whose id is not there yet (a redelivered order
// never makes a second row), then acknowledges it. Orders delivered to a
// consumer that died are claimed by the living after ConsumerOptions.
// ClaimIdle. An order the database refuses goes to the dead letters, its
// unit back to the store, and the rest keep flowing; while the database
// does not answer, the batch in hand is retried with a backoff, and
// acceptance goes on meanwhile (it needs only Redis).
type Consumer struct {
	db    *gorm.DB
	svc   *Service
	stock *stock.Store
	opt   ConsumerOptions
	name  string

	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	streams []string
	listed  time.Time

	// retries counts the batch writes the database did not answer, and
	// that were tried again after a backoff.
	retries atomic.Int64
	// unacked counts the orders written whose acknowledgement failed.
	unacked atomic.Int64
}

// ConsumerOptions configure a Consumer. Every field has a working default.
type ConsumerOptions struct {
	// Batch is the most orders read from one stream at a time. Default: 200.
	Batch int64
	// Block is how long a read waits for an order. It bounds how long
	// Close waits for the reading to stop. Default: 500ms.
	Block time.Duration
	// ClaimIdle is how long an order may stay delivered and unacknowledged
	// before another consumer takes it over (the service's -claim-idle).
	// It is how long the orders of a consumer that died wait, so it should
	// be short; it must outlast a live consumer's write of a batch, or two
	// consumers write the same batch (harmless: the insert skips ids
	// already there, but wasted). Default: 30s: a batch's write is bounded
	// by writeTimeout (10s) and the retry's backoff by maxBackoff (5s), so
	// a live consumer touches its batch again well within it, while a dead
	// one's orders wait half a minute, a fraction of a sale's minutes.
	ClaimIdle time.Duration
	// ClaimEvery is how often the consumer looks for such orders, and drops
	// the streams that hold none. Default: 5s, or ClaimIdle/2 when that is
	// shorter, so that a short ClaimIdle is not outwaited by the look.
	ClaimEvery time.Duration
	// Log receives what went wrong. Default: slog.Default().
	Log *slog.Logger
}

// Defaults of ConsumerOptions.
const (
	DefaultBatch      = 200
	DefaultBlock      = 500 * time.Millisecond
	DefaultClaimIdle  = 30 * time.Second
	DefaultClaimEvery = 5 * time.Second
)

// NewConsumer returns a consumer on db and the store's Redis; Run runs it.
func NewConsumer(db *gorm.DB, s *Service, opt ConsumerOptions) *Consumer {
	if opt.Batch <= 0 {
		opt.Batch = DefaultBatch
	}
	if opt.Block <= 0 {
		opt.Block = DefaultBlock
	}
	if opt.ClaimIdle <= 0 {
		opt.ClaimIdle = DefaultClaimIdle
	}
	if opt.ClaimEvery <= 0 {
		opt.ClaimEvery = min(DefaultClaimEvery, opt.ClaimIdle/2)
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	host, _ := os.Hostname()
	return &Consumer{
		db: db, svc: s, stock: s.stock, opt: opt,
		name: fmt.Sprintf("%s-%d-%s", host, os.Getpid(), rand.Text()[:6]),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
}

// Retries is how many times a batch's write failed without an answer
// from the database and was tried again after a backoff: a bounded rate
// while the database is down, not a spin.
func (c *Consumer) Retries() int64 { return c.retries.Load() }

// Unacknowledged is how many orders the consumer wrote and could not
// acknowledge (Redis did not answer): they stay queued, and are skipped as
// written when they are delivered again.
func (c *Consumer) Unacknowledged() int64 { return c.unacked.Load() }

// Name is the consumer's name in the group.
func (c *Consumer) Name() string { return c.name }

// Start runs the consumer in a goroutine of its own until Close.
func (c *Consumer) Start() { go c.run() }

// Close stops reading, finishes the batch in hand (its write and its
// acknowledgement, or, if the database does not answer, leaves it to the
// group: another consumer claims it), and returns.
func (c *Consumer) Close() error {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
	return nil
}

func (c *Consumer) stopped() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

func (c *Consumer) run() {
	defer close(c.done)
	ctx := context.Background()
	lastClaim := time.Now()
	for !c.stopped() {
		streams, err := c.streamList(ctx)
		if err != nil {
			c.opt.Log.Warn("the consumer cannot list the order streams", "error", err)
			c.sleep(c.opt.Block)
			continue
		}
		if len(streams) == 0 {
			c.sleep(c.opt.Block)
		} else {
			good, bad, err := c.stock.Queue().Read(ctx, c.name, streams, c.opt.Batch, c.opt.Block)
			// Delivered to this consumer even when another stream's node
			// failed: written now, or they would wait for the claim.
			c.handle(ctx, good, bad)
			if err != nil {
				c.opt.Log.Warn("the consumer cannot read the order streams", "error", err)
				c.sleep(c.opt.Block)
				continue
			}
		}
		if time.Since(lastClaim) >= c.opt.ClaimEvery {
			lastClaim = time.Now()
			c.claim(ctx)
		}
	}
}

// streamList returns the registered streams, read again every second.
func (c *Consumer) streamList(ctx context.Context) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.listed) < time.Second && c.streams != nil {
		return c.streams, nil
	}
	streams, err := c.stock.Queue().Streams(ctx)
	if err != nil {
		return nil, err
	}
	c.streams, c.listed = streams, time.Now()
	return streams, nil
}

// claim takes over the orders left with consumers that died, and drops the
// streams that hold none.
func (c *Consumer) claim(ctx context.Context) {
	streams, err := c.streamList(ctx)
	if err != nil {
		return
	}
	for _, st := range streams {
		good, bad, err := c.stock.Queue().Claim(ctx, c.name, st, c.opt.ClaimIdle, c.opt.Batch)
		if err != nil {
			c.opt.Log.Warn("the consumer cannot claim orders", "stream", st, "error", err)
			continue
		}
		if len(good)+len(bad) > 0 {
			c.opt.Log.Warn("claimed orders left by another consumer", "stream", st, "orders", len(good)+len(bad))
		}
		c.handle(ctx, good, bad)
	}
	if _, err := c.stock.Queue().ForgetDrained(ctx); err != nil {
		c.opt.Log.Warn("the consumer cannot drop drained streams", "error", err)
	}
	c.mu.Lock()
	c.listed = time.Time{}
	c.mu.Unlock()
}

func (c *Consumer) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.stop:
	case <-t.C:
	}
}

// handle writes a batch and acknowledges it; malformed entries and orders
// the database refuses go to the dead letters.
func (c *Consumer) handle(ctx context.Context, good, bad []stock.QueuedOrder) {
	for _, q := range bad {
		c.deadLetter(ctx, q, "malformed message")
	}
	if len(good) == 0 {
		return
	}
	for backoff := minBackoff; ; backoff = min(2*backoff, maxBackoff) {
		w, err := writeQueued(ctx, c.db, good)
		if err == nil {
			for _, r := range w.refused {
				c.deadLetter(ctx, r.q, r.reason)
			}
			c.svc.life.schedule(ctx, w.rows()...)
			if err := c.stock.Queue().Ack(ctx, append(w.written, w.voided...)); err != nil {
				c.unacked.Add(int64(len(w.written) + len(w.voided)))
				// Unacknowledged, they are delivered again and skipped
				// as written: nothing is lost.
				c.opt.Log.Warn("written orders not acknowledged; they will be delivered again", "error", err)
			}
			return
		}
		if c.stopped() {
			c.opt.Log.Warn("stopping with a batch unwritten; another consumer will claim it", "orders", len(good), "error", err)
			return
		}
		c.retries.Add(1)
		c.opt.Log.Warn("the database did not take a batch; retrying", "orders", len(good), "in", backoff, "error", err)
		c.sleep(backoff)
	}
}

// The backoff between two tries of a batch the database did not answer:
// doubled from minBackoff up to maxBackoff, so that a database down for
// minutes gets a try every few seconds from each consumer, not a spin.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
	// writeTimeout bounds one try of a batch's write.
	writeTimeout = 10 * time.Second
)

type refusal struct {
	q      stock.QueuedOrder
	reason string
}

// batchOutcome is how a batch of queued orders was written.
type batchOutcome struct {
	// written are in their rows now (or were already: a redelivery).
	written []stock.QueuedOrder
	// voided found a void row under their id: the reconciler settled them
	// as never written and returned their units. They are dropped.
	voided  []stock.QueuedOrder
	refused []refusal
}

// rows are the rows of the orders written.
func (w batchOutcome) rows() []Order {
	rows := make([]Order, len(w.written))
	for i, q := range w.written {
		rows[i] = queuedOrder(q)
	}
	return rows
}

// writeQueued inserts the batch's orders whose ids are not there yet, in
// one transaction. If the database refuses the batch, it writes the orders
// one by one and reports those it refuses. An error means the database did
// not answer, or refused for a reason of the moment (a deadlock, too many
// connections), or failed in a way that says nothing about the orders: retry.
func writeQueued(ctx context.Context, db *gorm.DB, qs []stock.QueuedOrder) (batchOutcome, error) {
	var w batchOutcome
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	var stale []stock.QueuedOrder
	err := db.WithContext(wctx).Transaction(func(tx *gorm.DB) error {
		var err error
		stale, err = insertFresh(tx, qs)
		return err
	})
	if err != nil && (!definite(db, err) || catalogue.Transient(err)) {
		return w, err
	}
	if err != nil {
		// The database refused the batch: find which order, one by one.
		var ok []stock.QueuedOrder
		stale = nil
		for _, q := range qs {
			var st []stock.QueuedOrder
			e := db.WithContext(wctx).Transaction(func(tx *gorm.DB) error {
				var err error
				st, err = insertFresh(tx, []stock.QueuedOrder{q})
				return err
			})
			if e != nil {
				if !definite(db, e) || catalogue.Transient(e) {
					return w, e
				}
				w.refused = append(w.refused, refusal{q, e.Error()})
				continue
			}
			stale = append(stale, st...)
			ok = append(ok, q)
		}
		qs = ok
	}
	if len(stale) > 0 {
		gone := make(map[string]bool, len(stale))
		for _, q := range stale {
			gone[q.MsgID+q.Stream] = true
			w.refused = append(w.refused, refusal{q, fmt.Sprintf("the stock of product %d was laid out anew (a reset, or a rebuild after Redis lost it) since this order was taken from layout %d", q.Layout.ID, q.Layout.Epoch)})
		}
		qs = slices.DeleteFunc(qs, func(q stock.QueuedOrder) bool { return gone[q.MsgID+q.Stream] })
	}
	// "Insert if absent" skips an order whose id is there (a redelivery, or
	// a void row) and one whose buyer has another order in the sale: read
	// which.
	ids := make([]int64, len(qs))
	for i, q := range qs {
		ids[i] = int64(q.Order)
	}
	var there []Order
	if len(ids) > 0 {
		if err := db.WithContext(wctx).Select("id", "user_id", "product_id", "status").Where("id IN ?", ids).Find(&there).Error; err != nil {
			return w, err
		}
	}
	have := make(map[idgen.ID]Order, len(there))
	for _, o := range there {
		have[o.ID] = o
	}
	for _, q := range qs {
		o, ok := have[q.Order]
		switch {
		case ok && o.Status == Void:
			w.voided = append(w.voided, q)
		case ok && o.UserID == q.User && o.ProductID == q.Layout.ID:
			w.written = append(w.written, q)
		case ok:
			w.refused = append(w.refused, refusal{q, fmt.Sprintf("order id %s belongs to another order", q.Order)})
		default:
			w.refused = append(w.refused, refusal{q, fmt.Sprintf("the buyer has another order in sale %d", q.Sale)})
		}
	}
	return w, nil
}

// queuedOrder is the row of a queued order. Its payment window starts now,
// when the row is written, not at the take: until then the buyer cannot
// pay (order_queued), and a window spent in the queue is not theirs.
func queuedOrder(q stock.QueuedOrder) Order {
	buyer, at, now := q.User, q.At, time.Now()
	var due *time.Time
	if q.Due != nil {
		d := now.Add(q.Due.Sub(q.At))
		due = &d
	}
	return Order{ID: q.Order, ProductID: q.Layout.ID, Sale: q.Sale, Buyer: &buyer, UserID: q.User, Shard: q.Shard,
		Lock: "none", Mode: string(q.Mode), Status: Unpaid, Key: q.Key, AcceptedAt: &at, CreatedAt: now,
		DueAt: due}
}

func (c *Consumer) deadLetter(ctx context.Context, q stock.QueuedOrder, reason string) {
	c.opt.Log.Error("a queued order was refused; it goes to the dead letters and its unit back on sale",
		"order", q.Order, "stream", q.Stream, "reason", reason)
	if err := c.stock.Queue().DeadLetter(ctx, q, reason); err != nil {
		c.opt.Log.Error("parking an order in the dead letters", "order", q.Order, "error", err)
		return
	}
	// Its unit is back: the other processes' sold-out flags must go too.
	c.svc.cat.Returned(ctx, q.Layout.ID)
}

// insertFresh inserts, in tx, those of qs taken from their product's
// current layout or from a past sale's, and returns the others. It reads
// the layouts under a shared lock on the products' rows, which a reset or a
// rebuild changes under an exclusive one (as insertSQL does for one order):
// an order taken from a layout that a rebuild replaced is either in before
// the change, and counted by it, or refused after it, and never sold twice.
func insertFresh(tx *gorm.DB, qs []stock.QueuedOrder) (stale []stock.QueuedOrder, err error) {
	var products []int64
	for _, q := range qs {
		if !slices.Contains(products, q.Layout.ID) {
			products = append(products, q.Layout.ID)
		}
	}
	lock := " LOCK IN SHARE MODE"
	if tx.Dialector.Name() == "sqlite" {
		lock = "" // one writer at a time: the transaction is the lock
	}
	var layouts []struct{ ID, Epoch, Sale int64 }
	if err := tx.Raw("SELECT id, epoch, sale FROM products WHERE id IN ?"+lock, products).Scan(&layouts).Error; err != nil {
		return nil, err
	}
	current := make(map[int64]struct{ ID, Epoch, Sale int64 }, len(layouts))
	for _, l := range layouts {
		current[l.ID] = l
	}
	var rows []Order
	for _, q := range qs {
		// An order of a past sale (a reset since its take) is written in
		// that sale: its buyer was told 202, and the new sale does not
		// count it. Only a layout replaced within the sale (a rebuild,
		// which counts the rows) refuses it.
		if l, ok := current[q.Layout.ID]; !ok || l.Sale == q.Sale && l.Epoch != q.Layout.Epoch {
			stale = append(stale, q)
			continue
		}
		rows = append(rows, queuedOrder(q))
	}
	if len(rows) == 0 {
		return stale, nil
	}
	return stale, tx.Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(&rows, 100).Error
}
