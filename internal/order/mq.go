package order

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"seckill/internal/catalogue"
	"seckill/internal/idgen"
	"seckill/internal/mq"
	"seckill/internal/stock"
)

// The mq mode: the unit is taken in Redis (lua's script, recorded in the
// ledger), then the order is published to RabbitMQ, and a consumer writes
// it. Redis and the broker share no transaction: a process that dies
// between the take and the publish leaves a unit out of the store and no
// order anywhere, until the reconciler finds the take. The async mode has
// no such moment: its take queues the order in the same Lua step.

// message is an order on its way through the broker.
type message struct {
	ID      string `json:"id"`
	Product int64  `json:"product"`
	Epoch   int64  `json:"epoch"`
	Sale    int64  `json:"sale"`
	User    int64  `json:"user"`
	Shard   int    `json:"shard"`
	Key     string `json:"key"`
	At      int64  `json:"at"`            // when the unit was taken, Unix ms
	Due     int64  `json:"due,omitempty"` // when the payment window ends, Unix ms
}

// publish sends the order of a unit taken for the mq mode to the broker.
// The purchase is answered once the broker confirmed it. When the broker
// surely does not have it, the unit goes back; when it may, the client is
// told the outcome is unknown and the reconciler settles it.
func (s *Service) publish(ctx context.Context, p catalogue.Product, req stock.Request, e stock.Entry, rc *Receipt) (Order, error) {
	m := message{ID: e.Order.String(), Product: p.ID, Epoch: p.Epoch, Sale: p.Sale, User: e.User, Shard: e.Shard,
		Key: e.Key, At: e.At.UnixMilli()}
	if d := due(p, e.At); d != nil {
		m.Due = d.UnixMilli()
	}
	body, err := json.Marshal(m)
	if err != nil {
		return Order{}, fmt.Errorf("encoding order %s: %w", e.Order, err)
	}
	pctx, cancel := context.WithTimeout(ctx, s.Budget().Record())
	defer cancel()
	err = s.opt.Broker.Publish(pctx, m.ID, body)
	switch {
	case err == nil:
		rc.Queued = true
		return queuedView(p, e, rc), nil
	case errors.Is(err, mq.ErrNotSent):
		s.giveBack(ctx, req, e, err)
		return Order{}, fmt.Errorf("publishing order %s (nothing was sold): %w", e.Order, err)
	}
	return Order{}, &UnsettledError{Order: e.Order, Err: err}
}

// parseMessage reads an order from the broker.
func parseMessage(body []byte) (stock.QueuedOrder, error) {
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		return stock.QueuedOrder{}, fmt.Errorf("malformed order message %q: %w", body, err)
	}
	id, err := idgen.ParseID(m.ID)
	if err != nil || id == 0 || m.User <= 0 || m.Product <= 0 {
		return stock.QueuedOrder{}, fmt.Errorf("malformed order message %q", body)
	}
	q := stock.QueuedOrder{Layout: stock.Layout{ID: m.Product, Epoch: m.Epoch}, Shard: m.Shard, Order: id, Sale: m.Sale,
		User: m.User, Key: m.Key, At: time.UnixMilli(m.At), Mode: stock.MQ}
	if m.Due > 0 {
		d := time.UnixMilli(m.Due)
		q.Due = &d
	}
	return q, nil
}

// MQConsumer writes the mq mode's orders: one per process, on a
// connection of its own. It takes a batch of messages, writes the orders
// in one transaction (insert-if-absent, as the async mode's Consumer), and
// acknowledges the batch once written. An order whose id holds a void row
// is dropped: the reconciler settled it as never written and returned its
// unit. An order the database refuses goes back to the store, its message
// acknowledged. While the database does not answer, the batch stays
// unacknowledged and is written again; a consumer that dies hands its
// batch back to the queue.
type MQConsumer struct {
	db     *gorm.DB
	svc    *Service
	broker *mq.Broker
	opt    ConsumerOptions
	stop   chan struct{}
	done   chan struct{}
}

// NewMQConsumer returns a consumer of the broker's queue; Start runs it.
// Of opt, it uses Batch (the prefetch too), Block and Log.
func NewMQConsumer(db *gorm.DB, s *Service, b *mq.Broker, opt ConsumerOptions) *MQConsumer {
	if opt.Batch <= 0 {
		opt.Batch = DefaultBatch
	}
	if opt.Block <= 0 {
		opt.Block = DefaultBlock
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	return &MQConsumer{db: db, svc: s, broker: b, opt: opt, stop: make(chan struct{}), done: make(chan struct{})}
}

// Start runs the consumer in a goroutine of its own until Close.
func (c *MQConsumer) Start() { go c.run() }

// Close stops taking messages, finishes the batch in hand, and returns; a
// batch it could not write goes back to the queue.
func (c *MQConsumer) Close() error {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
	return nil
}

func (c *MQConsumer) stopped() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

func (c *MQConsumer) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.stop:
	case <-t.C:
	}
}

func (c *MQConsumer) run() {
	defer close(c.done)
	for !c.stopped() {
		sub, err := c.broker.Subscribe(int(c.opt.Batch))
		if err != nil {
			c.opt.Log.Warn("the mq consumer cannot subscribe; trying again", "queue", c.broker.Queue(), "error", err)
			c.sleep(time.Second)
			continue
		}
		c.consume(sub)
		if err := sub.Close(); err != nil {
			c.opt.Log.Warn("closing the mq subscription", "error", err)
		}
	}
}

// consume handles batches until Close or until the subscription breaks.
func (c *MQConsumer) consume(sub *mq.Subscription) {
	ctx := context.Background()
	for !c.stopped() {
		ds, err := sub.Next(c.stop, int(c.opt.Batch), c.opt.Block)
		if err != nil {
			c.opt.Log.Warn("the mq subscription broke; subscribing again", "error", err)
			return
		}
		if len(ds) == 0 {
			continue
		}
		if !c.handle(ctx, ds) {
			return // unwritten: closing the subscription hands the batch back
		}
		if err := sub.Ack(ds); err != nil {
			// Delivered again and skipped as written: nothing is lost.
			c.opt.Log.Warn("written orders not acknowledged; they will be delivered again", "error", err)
			return
		}
	}
}

// handle writes a batch, retrying while the database does not answer; it
// reports whether the batch is settled (and may be acknowledged).
func (c *MQConsumer) handle(ctx context.Context, ds []mq.Delivery) bool {
	var qs []stock.QueuedOrder
	for _, d := range ds {
		q, err := parseMessage(d.Body)
		if err != nil {
			c.opt.Log.Error("dropping a malformed order message", "queue", c.broker.Queue(), "error", err)
			continue
		}
		qs = append(qs, q)
	}
	if len(qs) == 0 {
		return true
	}
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		w, err := writeQueued(ctx, c.db, qs)
		if err == nil {
			for _, q := range w.voided {
				c.opt.Log.Warn("an order came after the reconciler voided it; dropped (its unit went back then)", "order", q.Order)
			}
			for _, r := range w.refused {
				c.refuse(ctx, r)
			}
			c.svc.life.schedule(ctx, w.rows()...)
			return true
		}
		if c.stopped() {
			c.opt.Log.Warn("stopping with a batch unwritten; it goes back to the queue", "orders", len(qs), "error", err)
			return false
		}
		c.opt.Log.Warn("the database did not take a batch; retrying", "orders", len(qs), "in", backoff, "error", err)
		c.sleep(backoff)
	}
}

// refuse returns the unit of an order the database refused.
func (c *MQConsumer) refuse(ctx context.Context, r refusal) {
	q := r.q
	c.opt.Log.Error("an order from the broker was refused; its unit goes back on sale", "order", q.Order, "reason", r.reason)
	req := stock.Request{Product: stock.Product{Layout: q.Layout}, Mode: stock.MQ}
	c.svc.giveBack(ctx, req, stock.Entry{User: q.User, Order: q.Order, Key: q.Key, Shard: q.Shard, MQ: true}, r.reason)
}
