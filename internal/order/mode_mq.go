package order

import (
	"context"
	"fmt"

	"seckill/internal/api"
	"seckill/internal/stock"
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
	Take: stock.MQ, Queued: true,
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

func (mqSeller) sell(ctx context.Context, s *Service, sl sale, rc *Receipt) (Order, error) {
	return s.takeInRedis(ctx, sl, rc, func(ctx context.Context, sl sale, taken stock.Taken, rc *Receipt) (Order, error) {
		if err := s.keep(ctx, sl, taken); err != nil {
			return Order{}, err
		}
		return s.publish(ctx, sl.p, sl.req, taken.Entry, rc)
	})
}
