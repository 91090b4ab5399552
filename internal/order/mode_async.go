package order

import (
	"context"

	"gorm.io/gorm"

	"seckill/internal/api"
	"seckill/internal/stock"
)

var asyncMode = Mode{
	Name:    api.ModeAsync,
	Short:   "script + queue, 202",
	Summary: "lua's script also queues the order on the shard's stream, in the same atomic step; the buyer hears 202, a consumer writes the rows in batches.",
	Promises: "The unit and the queued order are one step: no moment holds one without the other. The consumer writes each order once " +
		"(an id already written is skipped), takes over a dead consumer's, and sends a row the database refuses to the dead letters, its unit back.",
	Breaks: "Until its row is written an order is only in Redis: a Redis that keeps nothing (no AOF) forgets 202s it answered. " +
		"The service refuses the mode on such a Redis for products that are not lab products (409 not_durable).",
	Test: "TestAsyncDurability", Package: "./internal/testkit/faults",
	where: stock.InRedis, Queued: true,
	taker:   func(stock.Locked, *gorm.DB) stock.Taker { return stock.Async{} },
	moments: moments{poison: true},
	seller:  async{},
}

type async struct{}

func (async) admit(s *Service, lab LabOptions) error {
	if lab.Faults.Poison && s.db.Dialector.Name() == "sqlite" {
		return errPoisonNeedsMySQL
	}
	return nil
}

func (async) sell(ctx context.Context, s *Service, sl sale, rc *Receipt) (Order, error) {
	return s.takeInRedis(ctx, sl, rc, func(_ context.Context, sl sale, taken stock.Taken, rc *Receipt) (Order, error) {
		// Queued in the take's own step: a server change after it cannot
		// part the unit from its order, so no keep.
		rc.Order, rc.Queued = taken.Order, true
		return queuedView(sl.p, taken.Entry, rc), nil
	})
}
