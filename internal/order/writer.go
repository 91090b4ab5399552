package order

import (
	"context"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"seckill/internal/catalogue"
	"seckill/internal/idgen"
	"seckill/internal/outbox"
	"seckill/internal/stock"
)

// NewConsumer returns the consumer of the async mode's queued orders (the
// Redis Streams) into db: one per process, all in one consumer group, each
// under a name of its own; Start runs it. It reads a batch from every
// stream and writes it in one transaction, inserting only orders whose id
// is not there yet (a redelivered order never makes a second row), then
// acknowledges it. Orders delivered to a consumer that died are claimed by
// the living after opt.ClaimIdle. An order the database refuses goes to
// the dead letters, its unit back to the store, and the rest keep flowing.
func NewConsumer(db *gorm.DB, s *Service, opt outbox.Options) *outbox.Consumer {
	name := outbox.UniqueName()
	src := outbox.NewStreams(s.streams, name, s.cat.Returned, opt)
	return outbox.NewConsumer(name, src, writer{db: db, life: s.life}, opt)
}

// NewMQConsumer returns the consumer of the mq mode's orders (the broker's
// queue) into db: one per process, on a connection of its own; Start runs
// it. It writes a batch as the async mode's consumer does, and
// acknowledges it once written. An order whose id holds a void row is
// dropped: the reconciler settled it as never written and returned its
// unit. An order the database refuses goes back to the store, its message
// acknowledged. While the database does not answer, the batch stays
// unacknowledged and is written again; a consumer that dies hands its
// batch back to the queue.
func NewMQConsumer(db *gorm.DB, s *Service, b *outbox.Broker, opt outbox.Options) *outbox.Consumer {
	giveBack := func(ctx context.Context, q outbox.QueuedOrder, reason string) {
		req := stock.Request{Product: stock.Product{Layout: q.Layout}, Taker: mqMode.Taker(stock.Locked{})}
		s.returns.giveBack(ctx, req, q.Entry, reason)
	}
	return outbox.NewConsumer(outbox.UniqueName(), outbox.NewRabbit(b, giveBack, opt), writer{db: db, life: s.life}, opt)
}

// writer is the consumers' Sink: it writes queued orders as rows, and
// schedules their payment deadlines.
type writer struct {
	db   *gorm.DB
	life *Lifecycle
}

func (w writer) Write(ctx context.Context, qs []outbox.QueuedOrder) (outbox.Outcome, error) {
	out, err := writeQueued(ctx, w.db, qs)
	if err == nil {
		w.life.schedule(ctx, rowsOf(out.Written)...)
	}
	return out, err
}

// writeTimeout bounds one try of a batch's write.
const writeTimeout = 10 * time.Second

// rowsOf are the rows of queued orders written.
func rowsOf(written []outbox.QueuedOrder) []Order {
	rows := make([]Order, len(written))
	for i, q := range written {
		rows[i] = queuedOrder(q)
	}
	return rows
}

// writeQueued inserts the batch's orders whose ids are not there yet, in
// one transaction. If the database refuses the batch, it writes the orders
// one by one and reports those it refuses. An error means the database did
// not answer, or refused for a reason of the moment (a deadlock, too many
// connections), or failed in a way that says nothing about the orders: retry.
func writeQueued(ctx context.Context, db *gorm.DB, qs []outbox.QueuedOrder) (outbox.Outcome, error) {
	var w outbox.Outcome
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	var stale []outbox.QueuedOrder
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
		var ok []outbox.QueuedOrder
		stale = nil
		for _, q := range qs {
			var st []outbox.QueuedOrder
			e := db.WithContext(wctx).Transaction(func(tx *gorm.DB) error {
				var err error
				st, err = insertFresh(tx, []outbox.QueuedOrder{q})
				return err
			})
			if e != nil {
				if !definite(db, e) || catalogue.Transient(e) {
					return w, e
				}
				w.Refused = append(w.Refused, outbox.Refusal{Order: q, Reason: e.Error()})
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
			w.Refused = append(w.Refused, outbox.Refusal{Order: q, Reason: fmt.Sprintf("the stock of product %d was laid out anew (a reset, or a rebuild after Redis lost it) since this order was taken from layout %d", q.Layout.ID, q.Layout.Epoch)})
		}
		qs = slices.DeleteFunc(qs, func(q outbox.QueuedOrder) bool { return gone[q.MsgID+q.Stream] })
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
			w.Voided = append(w.Voided, q)
		case ok && o.UserID == q.User && o.ProductID == q.Layout.ID:
			w.Written = append(w.Written, q)
		case ok:
			w.Refused = append(w.Refused, outbox.Refusal{Order: q, Reason: fmt.Sprintf("order id %s belongs to another order", q.Order)})
		default:
			w.Refused = append(w.Refused, outbox.Refusal{Order: q, Reason: fmt.Sprintf("the buyer has another order in sale %d", q.Sale)})
		}
	}
	return w, nil
}

// queuedOrder is the row of a queued order. Its payment window starts now,
// when the row is written, not at the take: until then the buyer cannot
// pay (order_queued), and a window spent in the queue is not theirs.
func queuedOrder(q outbox.QueuedOrder) Order {
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

// insertFresh inserts, in tx, those of qs taken from their product's
// current layout or from a past sale's, and returns the others. It reads
// the layouts under a shared lock on the products' rows, which a reset or a
// rebuild changes under an exclusive one (as insertSQL does for one order):
// an order taken from a layout that a rebuild replaced is either in before
// the change, and counted by it, or refused after it, and never sold twice.
func insertFresh(tx *gorm.DB, qs []outbox.QueuedOrder) (stale []outbox.QueuedOrder, err error) {
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
