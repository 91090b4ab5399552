package order

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"seckill/internal/catalogue"
	"seckill/internal/outbox"
	"seckill/internal/stock"
)

// The mq mode: the unit is taken in Redis (lua's script, recorded in the
// ledger), then the order is published to RabbitMQ, and a consumer writes
// it. Redis and the broker share no transaction: a process that dies
// between the take and the publish leaves a unit out of the store and no
// order anywhere, until the reconciler finds the take. The async mode has
// no such moment: its take queues the order in the same Lua step.

// publish sends the order of a unit taken for the mq mode to the broker.
// The purchase is answered once the broker confirmed it. When the broker
// surely does not have it, the unit goes back; when it may, the client is
// told the outcome is unknown and the reconciler settles it.
func (s *Service) publish(ctx context.Context, p catalogue.Product, req stock.Request, e stock.Entry, rc *Receipt) (Order, error) {
	q := stock.QueuedOrder{Layout: p.Stock().Layout, Shard: e.Shard, Order: e.Order, Sale: p.Sale, User: e.User,
		Key: e.Key, At: e.At, Due: due(p, e.At), Mode: stock.MQ}
	pctx, cancel := context.WithTimeout(ctx, s.Budget().Record())
	defer cancel()
	err := s.opt.Broker.PublishOrder(pctx, q)
	switch {
	case err == nil:
		rc.Queued = true
		return queuedView(p, e, rc), nil
	case errors.Is(err, outbox.ErrNotSent):
		s.giveBack(ctx, req, e, err)
		return Order{}, fmt.Errorf("publishing order %s (nothing was sold): %w", e.Order, err)
	}
	return Order{}, &UnsettledError{Order: e.Order, Err: err}
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
	giveBack := func(ctx context.Context, q stock.QueuedOrder, reason string) {
		req := stock.Request{Product: stock.Product{Layout: q.Layout}, Mode: stock.MQ}
		s.giveBack(ctx, req, stock.Entry{User: q.User, Order: q.Order, Key: q.Key, Shard: q.Shard, MQ: true}, reason)
	}
	return outbox.NewConsumer(outbox.UniqueName(), outbox.NewRabbit(b, giveBack, opt), writer{db: db, life: s.life}, opt)
}
