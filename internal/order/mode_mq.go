package order

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"

	"gorm.io/gorm"

	"seckill/internal/api"
	"seckill/internal/catalogue"
	"seckill/internal/outbox"
	"seckill/internal/stock"
	"seckill/internal/telemetry"
)

var mqMode = Mode{
	Name:    api.ModeMQ,
	Short:   "script, then RabbitMQ, 202",
	Summary: "lua's script takes the unit; the order is then published to RabbitMQ (with publisher confirms), and a consumer writes the rows.",
	Promises: "The buyer hears 202 once the broker confirmed the order; a publish the broker surely did not get gives the unit back, " +
		"and one it may have got is left to the reconciler, which waits for the queue before it judges.",
	Breaks: "Redis and the broker share no transaction: a process that dies between the take and the publish (the fault crash_after_take) " +
		"strands a unit, out of the store and in no order, until the reconciler finds the take and returns it.",
	Test: "TestMQ/CrashAfterTake", Package: "./internal/outbox",
	where: stock.InRedis, Queued: true,
	taker:   func(stock.Locked, *gorm.DB) stock.Taker { return stock.Lua{Published: true} },
	moments: moments{crashAfterTake: true},
	seller:  mqSeller{},
}

type mqSeller struct{}

func (mqSeller) admit(s *Service, _ LabOptions) error {
	if s.opt.Broker == nil {
		return fmt.Errorf("%w: the mq mode needs RabbitMQ, and this service has none (RABBITMQ_URL)", ErrInvalid)
	}
	return nil
}

func (m mqSeller) sell(ctx context.Context, s *Service, sl sale, rc *Receipt) (Order, error) {
	return s.takeInRedis(ctx, sl, rc, func(ctx context.Context, sl sale, taken stock.Taken, rc *Receipt) (Order, error) {
		if err := s.keep(ctx, sl, taken); err != nil {
			return Order{}, err
		}
		return m.publish(ctx, s, sl.p, sl.req, taken.Entry, rc)
	})
}

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
func (mqSeller) publish(ctx context.Context, s *Service, p catalogue.Product, req stock.Request, e stock.Entry, rc *Receipt) (Order, error) {
	q := outbox.QueuedOrder{Entry: e, Layout: p.Stock().Layout, Sale: p.Sale, Due: due(p, e.At), Mode: api.ModeMQ}
	pctx, cancel := context.WithTimeout(ctx, s.Budget().Record())
	defer cancel()
	// The message carries this span's context (its traceparent header), for
	// the consumer's batch to link to.
	pctx, span := telemetry.Start(pctx, "outbox.publish")
	err := s.opt.Broker.PublishOrder(pctx, q)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("seckill.order_id", e.Order.String()), attribute.String("messaging.system", "rabbitmq"))
		telemetry.Fail(span, err)
	}
	span.End()
	switch {
	case err == nil:
		rc.Queued = true
		return queuedView(p, e, rc), nil
	case errors.Is(err, outbox.ErrNotSent):
		s.returns.giveBack(ctx, req, e, err)
		return Order{}, fmt.Errorf("publishing order %s (nothing was sold): %w", e.Order, err)
	}
	return Order{}, &UnsettledError{Order: e.Order, Err: err}
}
